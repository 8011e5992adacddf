// Gradient bookkeeping and re-assembly for tensor-parallel modules (any module tree whose sharded
// parameters are described by a ShardLayout, e.g. TextTpModel::shard_layout()).
//
// After backward, in this order (every rank of the group, same order):
//   1. FinishTpGradients(module, layout, tp): parameters held by several TP ranks with partial
//      gradients (replicated KV heads, T > Hkv) get the sum over their holders, so replicas stay
//      identical after the optimizer step. One all-reduce over the TP group of the affected
//      gradients zero-padded to full shape (no call when nothing is replicated).
//      Replicated parameters (norms, row-parallel biases) already have complete, identical
//      gradients (their inputs' gradients were all-reduced by the TP layers).
//   2. AllReduceDataParallelGrads(module, dp, ...): the same shard over the DP group
//   ("text.dp<j>").
//      dhp SUMS by default: the step loop divides each rank's loss sum by the GLOBAL token count
//      (count all-reduced over DP and micro-batches) before backward, so the summed gradient is
//      exactly the single-rank gradient of the batch mean. kMean divides by the DP size instead
//      (for losses already averaged per replica).
//   3. GradSquaredNorm(module, layout, tp): the squared L2 norm of the full gradient (each element
//      of the full model counted once), for global clipping together with the vision stage.
// GatherFullTensors re-assembles full HF-shaped parameters or gradients (after step 1) on every
// TP rank: all-gather of each shard along its dim, keeping one copy of repeated ranges.
//
// Failures of the communicator or of LibTorch come back as Statuses. Thread-safety: not
// thread-safe (the rank's training thread); collectives as in communicator.h.
#ifndef DHP_WORKER_PARALLEL_TP_STATE_H_
#define DHP_WORKER_PARALLEL_TP_STATE_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/parallel/tp_layers.h"

namespace dhp::tp {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

enum class TensorKind { kParameters, kGradients };

// Sum of partial gradients over the holders of replicated shards (step 1 above), in
// `reduce_dtype` (nullopt: the gradients' dtype); the gradients keep their dtype.
absl::Status FinishTpGradients(torch::nn::Module& module, const ShardLayout& layout,
                               comm::Communicator& tp,
                               std::optional<at::ScalarType> reduce_dtype = std::nullopt);

enum class DpGradReduce { kSum, kMean };
inline constexpr int64_t kDefaultBucketBytes = int64_t{64} << 20;

// All-reduces every parameter's gradient over `dp` in buckets of at most `bucket_bytes` of
// gradient (one all-reduce per bucket, parameters in named_parameters() order; undefined
// gradients count as zeros and are defined afterwards), each bucket converted to `reduce_dtype`
// for the collective (nullopt: as they are; fp32 for bf16 gradients doubles the bytes and sums
// without bf16 rounding) and back. No-op for a group of one.
absl::Status AllReduceDataParallelGrads(torch::nn::Module& module, comm::Communicator& dp,
                                        DpGradReduce reduce = DpGradReduce::kSum,
                                        int64_t bucket_bytes = kDefaultBucketBytes,
                                        std::optional<at::ScalarType> reduce_dtype = std::nullopt);

// Squared L2 norm (fp64) of the full gradient, the same on every TP rank: sharded parameters
// contribute their shard (divided by its number of holders), replicated ones 1/T of theirs, then
// one all-reduce over `tp`. Call after FinishTpGradients.
absl::StatusOr<double> GradSquaredNorm(torch::nn::Module& module, const ShardLayout& layout,
                                       comm::Communicator& tp);

// Full HF-shaped parameters or gradients (undefined gradients as zeros) by name, in
// named_parameters() order, on every rank of `tp`. Detached copies.
absl::StatusOr<NamedTensors> GatherFullTensors(torch::nn::Module& module, const ShardLayout& layout,
                                               comm::Communicator& tp, TensorKind kind);

}  // namespace dhp::tp

#endif  // DHP_WORKER_PARALLEL_TP_STATE_H_
