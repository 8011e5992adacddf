#include "worker/rank/batch.h"

#include <c10/util/Exception.h>

namespace dhp {
namespace {

at::Tensor CopyToDevice(const void* data, at::IntArrayRef sizes, at::ScalarType dtype,
                        const at::Device& device) {
  // from_blob aliases the vector; copy=true makes a fresh tensor even on the CPU.
  return at::from_blob(const_cast<void*>(data), sizes, at::TensorOptions().dtype(dtype))
      .to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

PackedBatch ToPackedBatch(const data::PackedSequence& seq, const at::Device& device) {
  const int64_t s = seq.num_tokens();
  TORCH_CHECK_VALUE(static_cast<int64_t>(seq.labels.size()) == s, "packed sequence: ",
                    seq.labels.size(), " labels for ", s, " tokens");
  TORCH_CHECK_VALUE(static_cast<int64_t>(seq.position_ids.size()) == 3 * s,
                    "packed sequence: ", seq.position_ids.size(), " position ids for ", s,
                    " tokens (want 3 * S)");
  TORCH_CHECK_VALUE(
      static_cast<int64_t>(seq.pixel_values.size()) == seq.num_patches * seq.patch_dim,
      "packed sequence: ", seq.pixel_values.size(), " pixel values for ", seq.num_patches,
      " patches of ", seq.patch_dim);
  PackedBatch batch;
  batch.input_ids = CopyToDevice(seq.input_ids.data(), {s}, at::kLong, device);     // [S]
  batch.labels = CopyToDevice(seq.labels.data(), {s}, at::kLong, device);           // [S]
  batch.position_ids = CopyToDevice(seq.position_ids.data(), {3, s}, at::kLong, device);  // [3, S]
  batch.cu_seqlens = seq.cu_seqlens;
  if (seq.num_patches > 0) {
    batch.pixel_values =  // [N, 1176]
        CopyToDevice(seq.pixel_values.data(), {seq.num_patches, seq.patch_dim}, at::kFloat, device);
  }
  for (const auto& g : seq.image_grid_thw) batch.image_grids.push_back(GridThw{g[0], g[1], g[2]});
  return batch;
}

int64_t CountLossTargets(const data::PackedSequence& seq) {
  const int64_t s = seq.num_tokens();
  std::vector<bool> sample_start(s, false);
  if (s > 0) sample_start[0] = true;
  for (int64_t c : seq.cu_seqlens) {
    if (c >= 0 && c < s) sample_start[c] = true;
  }
  int64_t count = 0;
  for (int64_t j = 1; j < s; ++j) {  // target position j is predicted by position j - 1
    if (!sample_start[j] && seq.labels[j] != data::kIgnoreLabel) ++count;
  }
  return count;
}

int64_t CountImageTokens(const data::PackedSequence& seq, int spatial_merge_size) {
  const int64_t merge2 = static_cast<int64_t>(spatial_merge_size) * spatial_merge_size;
  int64_t n = 0;
  for (const auto& g : seq.image_grid_thw) n += g[0] * g[1] * g[2] / merge2;
  return n;
}

}  // namespace dhp
