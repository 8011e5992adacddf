#include "worker/parallel/vision_comm_volume.h"

namespace dhp {
namespace {

int64_t AllReduceBytes(int64_t n, int p) { return 2 * n * (p - 1) / p; }

void Add(OpVolumes& v, const char* op, int64_t calls, int64_t sent, int64_t received) {
  comm::CommCounters& c = v[op];
  c.calls += calls;
  c.tensor_bytes_sent += sent;
  c.tensor_bytes_received += received;
}

}  // namespace

OpVolumes UlyssesStepVolume(const VisionConfig& config, const VisionSequenceSplit& split, int rank,
                            int64_t dtype_bytes, UlyssesOutputGrad output_grad) {
  OpVolumes v;
  const int64_t p = split.sp;
  if (p <= 1) return v;
  const int64_t b = dtype_bytes;
  const int64_t h = config.hidden_size;
  const int64_t n = split.num_patches;
  const int64_t s_r = split.patches_per_rank[rank];
  const int64_t f = static_cast<int64_t>(config.fullatt_block_indexes.size());
  const int64_t per_block = 4 * b * (h / p) * (s_r * (p - 1) + (n - s_r));
  Add(v, comm::kOpAllToAll, 4 * f, f * per_block, f * per_block);

  const int64_t out = config.out_hidden_size;
  const int64_t gather = split.max_units() * out * b * (p - 1);
  Add(v, comm::kOpAllGather, 1, gather, gather);
  if (output_grad == UlyssesOutputGrad::kPartialSum) {
    const int64_t u = n / split.merge_unit;
    const int64_t u_r = split.units_per_rank[rank];
    Add(v, comm::kOpReduceScatter, 1, (u - u_r) * out * b, u_r * (p - 1) * out * b);
  }
  return v;
}

OpVolumes VisionTpStepVolume(const VisionConfig& config, int64_t num_patches, int tp,
                             int64_t dtype_bytes) {
  OpVolumes v;
  if (tp <= 1) return v;
  const int64_t b = dtype_bytes;
  const int64_t seq = num_patches * config.hidden_size * b;  // [N, h]
  const int64_t units =
      num_patches / (int64_t{config.spatial_merge_size} * config.spatial_merge_size);
  const int64_t merged = units * config.out_hidden_size * b;  // [U, out]
  const int64_t blocks = config.depth;
  const int64_t bytes = (4 * blocks + 1) * AllReduceBytes(seq, tp) + AllReduceBytes(merged, tp);
  Add(v, comm::kOpAllReduce, 4 * blocks + 2, bytes, bytes);
  return v;
}

comm::CommCounters TotalOf(const OpVolumes& volumes) {
  comm::CommCounters total;
  for (const auto& [op, c] : volumes) total += c;
  return total;
}

}  // namespace dhp
