// VisionTpTransformer: the Qwen2.5-VL vision tower under Megatron tensor parallelism over one TP
// group: the baseline the reference design compares Ulysses against. Every rank runs the WHOLE
// sequence; the attention heads, MLP columns and merger columns are split over the ranks.
//
// Layout over a group of size P (rank r), by Hugging Face parameter name (relative to the tower):
//   attn.qkv.{weight,bias}     column-parallel by heads. HF stacks the rows as [q; k; v], each
//                              [H*D]: rank r holds rows [r*H*D/P, (r+1)*H*D/P) of EACH third,
//                              stored as [q_r; k_r; v_r] ([3*H*D/P, h]) so that the unchanged
//                              VisionAttention::QkvHeads yields its H/P local heads.
//   attn.proj.weight           row-parallel (columns [r*h/P, (r+1)*h/P)); bias replicated
//   mlp.{gate,up}_proj.*       column-parallel (rows [r*I/P, (r+1)*I/P)); weight and bias
//   mlp.down_proj.weight       row-parallel; bias replicated
//   merger.mlp.0.{weight,bias} column-parallel (rows of the 4h x 4h layer)
//   merger.mlp.2.weight        row-parallel; bias replicated
//   everything else            replicated: patch_embed, norm1/norm2, merger.ln_q
// Forward per block (x [N, h] replicated): h1 = CopyToParallelRegion(norm1(x)) -> local heads ->
// attention (windows or frames, as the single-rank tower) -> x + (ReduceFromParallelRegion(
// o_r W_proj,r^T) + b_proj); the MLP likewise (CopyTo, gate/up, silu, down, ReduceFrom, + b).
// Merger: CopyTo(ln_q(x) as [U, 4h]) -> mlp.0 shard -> GELU -> ReduceFrom(mlp.2 shard) + b.
// CopyTo is the identity forward and an all-reduce (sum) backward; ReduceFrom the reverse, so
// replicated parameters get COMPLETE, identical gradients on every rank and sharded ones the
// complete gradient of their shard: no gradient reduction is needed within the TP group (only
// over data-parallel replicas). The upstream gradient of the output must be the complete one
// (identical on every rank). Communication per step: vision_comm_volume.h.
//
// Requirements (ValidateVisionTp): P divides num_heads, intermediate_size and 4*hidden_size.
// Errors: Create/Gather* return a Status; Forward and backward throw c10::Error (call inside the
// rank's CatchTorch boundary). Thread-safety: not thread-safe; one rank's training thread. The
// Communicator is borrowed and must outlive this object and every backward pass.
#ifndef DHP_WORKER_PARALLEL_VISION_TP_H_
#define DHP_WORKER_PARALLEL_VISION_TP_H_

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/model/tensor_source.h"
#include "worker/model/vision_model.h"

namespace dhp {

enum class VisionTpShardKind {
  kReplicated,
  kRows,     // dim 0 split evenly (column-parallel weight or bias)
  kQkvRows,  // dim 0 viewed as [3, H*D]: each third split evenly
  kCols,     // dim 1 split evenly (row-parallel weight)
};

// By parameter name relative to the tower (e.g. "blocks.3.attn.qkv.weight").
VisionTpShardKind VisionTpShardOf(const std::string& name);

// OK when the degree divides heads, intermediate_size and 4*hidden_size; otherwise
// InvalidArgument naming the field, e.g. "vision tensor-parallel degree 3 must divide
// num_heads 16".
absl::Status ValidateVisionTp(const VisionConfig& config, int tp);

// Rank r's shard of a full HF-shaped tensor, and the full tensor from every rank's shard (in rank
// order). Contiguous copies.
at::Tensor ShardVisionTensor(const std::string& name, const at::Tensor& full, int rank, int size);
at::Tensor UnshardVisionTensor(const std::string& name, const std::vector<at::Tensor>& shards);

// Rank r's shard of parameter `name` (relative to the tower) read from `src`, where it is named
// prefix + name: only the shard's slices are read (shard-first).
at::Tensor ReadVisionShard(const TensorSource& src, const std::string& prefix,
                           const std::string& name, int rank, int size);

class VisionTpTransformer {
 public:
  // Builds the tower from this rank's shards of every parameter, read from `src` (only those
  // slices: shard-first), where they are named `prefix` + the tower's names (e.g. "visual."),
  // in the source's dtype and device; no full-size or default-initialised tensor is made.
  // NotFound naming a missing parameter; InvalidArgument for a shape mismatch or an invalid
  // degree.
  static absl::StatusOr<std::unique_ptr<VisionTpTransformer>> Create(const VisionConfig& config,
                                                                     const TensorSource& src,
                                                                     const std::string& prefix,
                                                                     comm::Communicator& comm);
  // Convenience: the shards of a full single-rank tower's parameters (copied).
  static absl::StatusOr<std::unique_ptr<VisionTpTransformer>> Create(const VisionTransformer& full,
                                                                     comm::Communicator& comm);

  // pixels: [N, 1176] (identical on every rank) -> [N/4, out_hidden] in input order, identical
  // on every rank.
  at::Tensor Forward(const at::Tensor& pixels, const VisionWindowPlan& plan);

  // Collective (all-gathers over the group; counted in its CommStats): every rank gets, for
  // every parameter name, the full HF-shaped gradient (undefined gradients count as zeros) /
  // parameter. For tests and checkpoints.
  absl::StatusOr<std::map<std::string, at::Tensor>> GatherFullGradients();
  absl::StatusOr<std::map<std::string, at::Tensor>> GatherFullParameters();

  // The tower holding this rank's shards under the HF names (its config is the full one).
  VisionTransformer& model() { return model_; }

 private:
  VisionTpTransformer(VisionTransformer model, comm::Communicator& comm);

  absl::StatusOr<std::map<std::string, at::Tensor>> GatherFull(bool grads);
  // x [S, in] -> ReduceFrom(x W_r^T) + b: [S, out].
  at::Tensor RowParallel(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

  VisionTransformer model_;
  comm::Communicator& comm_;
};

}  // namespace dhp

#endif  // DHP_WORKER_PARALLEL_VISION_TP_H_
