// The hand-off between the vision and the text stage of the distributed step, both directions
// by one function:
//   kEmbeddings  text rank (d, j) takes the image embeddings of vision rank (d, j mod Sv)
//                (identical on every vision rank of replica d), tag 0;
//   kGradients   vision rank (d, i) takes d(loss)/d(image embeddings) of text rank (d, i mod Tt)
//                (complete and identical on every text rank of replica d), tag 1.
// A pair whose two ends are one process (collocated, Layout::HandOffInMemory or a coinciding
// pair) passes the tensor itself: no copy, zero bytes, nothing recorded in any CommStats.
// Otherwise Send/Recv over the `wire` communicator (every world rank in world-rank order, named
// "handoff" so that its bytes are counted apart). Pairs run in one global order (replica, then
// destination rank), so the exchange cannot deadlock. Replicas without images are skipped.
//
// Errors: the communicator's Statuses. Thread-safety: none needed (no state); the rank's
// training thread, every world rank calling with the same directions in the same order.
#ifndef DHP_WORKER_RANK_HANDOFF_H_
#define DHP_WORKER_RANK_HANDOFF_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "worker/comm/communicator.h"
#include "worker/model/qwen2_5_vl.h"

namespace dhp {

inline constexpr char kHandoffGroup[] = "handoff";

enum class HandOffDirection { kEmbeddings, kGradients };

// Who this rank is and how tensors travel.
struct HandOffRoute {
  comm::Layout layout;
  int world_rank = 0;
  comm::Communicator* wire = nullptr;  // may be null when Layout::HandOffInMemory()
  at::Device device = at::kCPU;        // of receive buffers
  int64_t hidden = 0;                  // columns of the embeddings (vision out_hidden_size)
  at::ScalarType dtype = at::kFloat;   // of the embeddings and their gradient (vision dtype)
};

// Rows of each replica's image embeddings (merged image tokens), 0 for one without images.
std::vector<int64_t> ImageRows(const std::vector<PackedBatch>& batches,
                               const VisionConfig& config);

// Collective over the world. `mine`: this rank's source tensor for `direction` ([rows[d],
// hidden] in route.dtype; undefined where it is no source). Returns what this rank receives as a
// destination ([rows[d], hidden]), undefined on a rank that is none.
absl::StatusOr<at::Tensor> HandOff(const HandOffRoute& route, HandOffDirection direction,
                                   const std::vector<int64_t>& rows, const at::Tensor& mine);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_HANDOFF_H_
