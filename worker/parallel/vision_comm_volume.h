// Analytic per-rank communication volume of one vision training step (forward + backward) under
// Ulysses sequence parallelism and under vision tensor parallelism: what the Communicators'
// CommStats must record (the tests compare them EXACTLY), and what the benchmarks print. Pure
// C++ (no LibTorch); stateless and thread-safe.
//
// Notation: P group size, N patches, S_r patches of rank r (VisionSequenceSplit), U = N/4 and
// U_r = S_r/4 merged tokens, U_max = max_r U_r, h = hidden_size = H*D, H heads, out =
// out_hidden_size, b = bytes per element as it travels (4 for fp32), F = number of
// full-attention blocks, L = depth. Byte counts follow comm_stats.h (per rank, per call; bytes
// by tensor size, not bytes on the wire).
//
// Ulysses (UlyssesVisionTransformer), per full-attention block:
//   forward   q,k,v all-to-all ([S_r,3,H,D] -> [N,3,H/P,D], one fused call)
//               sent 3*S_r*h*(P-1)/P*b           received 3*(N-S_r)*(h/P)*b
//             output all-to-all ([N,H/P,D] -> [S_r,H,D])
//               sent (N-S_r)*(h/P)*b             received S_r*h*(P-1)/P*b
//   backward  the adjoint of each (the same two exchanges in reverse), the same bytes mirrored
//   => per block: 4 calls, sent = received = 4*b*h*(S_r*(P-1) + (N-S_r))/P
//      (even split S_r = N/P: forward, each of q, k, v and the output sends (P-1)/P of its
//       (N/P)*h*b bytes, i.e. 4*N*h*b*(P-1)/P^2 per rank: DeepSpeed-Ulysses' 4*N*h/P per layer
//       up to the (P-1)/P factor; backward the same again: 8*N*h*b*(P-1)/P^2 per rank)
//   output    all-gather of the merged tokens ([U_r, out] -> [U, out], uneven rows padded to
//             U_max on the wire): 1 call, sent = received = U_max*out*b*(P-1)
//   backward of the output: kReplicated: none (each rank keeps its own rows of the gradient);
//             kPartialSum: reduce-scatter (sum): 1 call, sent (U-U_r)*out*b,
//             received U_r*(P-1)*out*b
//   Window blocks, patch embedding, rotary, merger: no communication. P = 1: nothing at all.
//   NOT included: the gradient reduction over the SP group (all-reduce or ZeRO-1
//   reduce-scatter of the parameter gradients), which the step loop issues.
//
// Vision TP (VisionTpTransformer), per block: forward all-reduce after the row-parallel attention
// proj and MLP down_proj ([N, h] each), backward all-reduce at the two copy-to-parallel-region
// inputs (norm1 -> qkv, norm2 -> gate/up; [N, h] each); merger: forward all-reduce after mlp.2
// ([U, out]), backward all-reduce before mlp.0 ([U, 4h] = [N, h]). Each all-reduce of n bytes
// moves 2*n*(P-1)/P (integer division) each way:
//   => 4L+2 calls, sent = received = (4L+1)*AR(N*h*b) + AR(U*out*b),  AR(n) = 2*n*(P-1)/P
//   (Megatron: 2 all-reduces of S*h forward and 2 backward per layer.)
#ifndef DHP_WORKER_PARALLEL_VISION_COMM_VOLUME_H_
#define DHP_WORKER_PARALLEL_VISION_COMM_VOLUME_H_

#include <cstdint>
#include <map>
#include <string>

#include "common/model_presets.h"
#include "worker/comm/comm_stats.h"
#include "worker/parallel/vision_sequence_split.h"

namespace dhp {

// What the vision ranks receive as the gradient of the all-gathered output embeddings.
enum class UlyssesOutputGrad {
  // Every rank's upstream gradient is the COMPLETE gradient (identical on every rank, e.g. the
  // text TP ranks' dL/d(embeddings) after their all-reduce). The all-gather's backward keeps this
  // rank's rows: no communication. Feeding a rank only its own rows (zeros elsewhere) works too.
  kReplicated,
  // Upstream gradients are PARTIAL: the true gradient is their sum over the SP group (e.g. each
  // rank computed a loss on different tokens). The all-gather's backward is a reduce-scatter
  // with sum (the reference design's choice).
  kPartialSum,
};

// Op name (comm::kOpAllToAll, ...) -> expected counters of `rank` for one forward + backward.
using OpVolumes = std::map<std::string, comm::CommCounters>;

OpVolumes UlyssesStepVolume(const VisionConfig& config, const VisionSequenceSplit& split, int rank,
                            int64_t dtype_bytes, UlyssesOutputGrad output_grad);

OpVolumes VisionTpStepVolume(const VisionConfig& config, int64_t num_patches, int tp,
                             int64_t dtype_bytes);

// Sum of the counters over ops.
comm::CommCounters TotalOf(const OpVolumes& volumes);

}  // namespace dhp

#endif  // DHP_WORKER_PARALLEL_VISION_COMM_VOLUME_H_
