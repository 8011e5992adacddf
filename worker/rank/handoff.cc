#include "worker/rank/handoff.h"

#include "common/status_macros.h"
#include "worker/model/vision_window.h"

namespace dhp {

std::vector<int64_t> ImageRows(const std::vector<PackedBatch>& batches,
                               const VisionConfig& config) {
  std::vector<int64_t> rows;
  for (const PackedBatch& b : batches) {
    int64_t m = 0;
    for (const GridThw& g : b.image_grids) m += MergedTokens(g, config);
    rows.push_back(m);
  }
  return rows;
}

absl::StatusOr<at::Tensor> HandOff(const HandOffRoute& route, HandOffDirection direction,
                                   const std::vector<int64_t>& rows, const at::Tensor& mine) {
  const comm::Layout& layout = route.layout;
  const bool embeddings = direction == HandOffDirection::kEmbeddings;
  const int src_degree = embeddings ? layout.vision_degree : layout.text_degree;
  const int dst_degree = embeddings ? layout.text_degree : layout.vision_degree;
  const auto src_rank = embeddings ? comm::VisionWorldRank : comm::TextWorldRank;
  const auto dst_rank = embeddings ? comm::TextWorldRank : comm::VisionWorldRank;
  const int tag = embeddings ? 0 : 1;
  const int me = route.world_rank;
  at::Tensor out;
  for (int d = 0; d < layout.dp; ++d) {
    if (rows[d] == 0) continue;
    for (int k = 0; k < dst_degree; ++k) {
      const int src = src_rank(layout, d, k % src_degree);
      const int dst = dst_rank(layout, d, k);
      if (src == dst) {
        if (me == dst) out = mine;  // by reference: zero bytes
      } else if (me == src) {
        DHP_RETURN_IF_ERROR(route.wire->Send(mine.to(route.dtype).contiguous(), dst, tag));
      } else if (me == dst) {
        out = at::empty({rows[d], route.hidden},
                        at::TensorOptions().dtype(route.dtype).device(route.device));
        DHP_RETURN_IF_ERROR(route.wire->Recv(out, src, tag));
      }
    }
  }
  return out;
}

}  // namespace dhp
