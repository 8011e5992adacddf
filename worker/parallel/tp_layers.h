// Megatron tensor-parallel linear layers, built from the FULL Hugging Face-shaped weights so that
// a TP model is constructed from a single-rank model or checkpoint and keeps only its shard.
//
//   ColumnParallelLinear   y_r = x W_r^T + b_r: W_r = rows ranges[r] of the full [out, in]
//                          weight, b_r the same slice of the bias. Output [S, out_r] is this
//                          rank's slice of the output features. The input must already be in the
//                          parallel region (comm::CopyToParallelRegion: identity forward,
//                          all-reduce backward); the caller applies it once per branch, so q/k/v
//                          (and gate/up) share one backward all-reduce.
//   RowParallelLinear      y = sum_r(x_r W_r^T) + b: W_r = columns ranges[r] of the full weight;
//                          the sum is comm::ReduceFromParallelRegion (all-reduce forward, identity
//                          backward), and the bias (replicated, not sharded) is added once after
//                          it. Output [S, out], complete and identical on every rank.
//
// Parameter names are the HF ones ("weight", "bias"), so a TP model's named_parameters() lists
// the checkpoint's names, each holding a shard. Re-assembly of a full tensor from the shards:
// concatenate along dim 0 for column-parallel weights and biases, along dim 1 for row-parallel
// weights, in TP-rank order, keeping one copy of ranges held by several ranks (replicated KV
// heads); see ParamShard (tp_shard.h) and GatherFullTensors (tp_state.h). Every sharded
// module implements TpSharded, and CollectShardLayout walks a module tree for them.
//
// Thread-safety: not thread-safe (one rank's training thread). Modules that communicate borrow
// the Communicator, which must outlive them and their backward passes.
#ifndef DHP_WORKER_PARALLEL_TP_LAYERS_H_
#define DHP_WORKER_PARALLEL_TP_LAYERS_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "worker/comm/communicator.h"
#include "worker/model/tensor_source.h"
#include "worker/parallel/tp_shard.h"

namespace dhp::tp {

// Full parameter name -> its shard, for the sharded parameters of a module tree; parameters
// absent from the map are replicated (every rank holds the whole tensor).
using ShardLayout = std::map<std::string, ParamShard>;

// Implemented by modules whose parameters are sharded.
class TpSharded {
 public:
  virtual ~TpSharded() = default;
  // (parameter name relative to this module, its shard) for each sharded parameter.
  virtual std::vector<std::pair<std::string, ParamShard>> ParamShards() const = 0;
};

// Walks `root` and its descendants; names are relative to root ("model.layers.0.mlp...").
ShardLayout CollectShardLayout(const torch::nn::Module& root);

// A detached contiguous copy of full.narrow(dim, range.start, range.length).
at::Tensor ShardOf(const at::Tensor& full, int64_t dim, const ShardRange& range);

class ColumnParallelLinearImpl : public torch::nn::Module, public TpSharded {
 public:
  // full_weight: [out, in]; full_bias: [out] or undefined (no bias). rows[r]: the output
  // features of TP rank r (one entry per rank; may repeat for replicated KV heads).
  ColumnParallelLinearImpl(const at::Tensor& full_weight, const at::Tensor& full_bias,
                           std::vector<ShardRange> rows, int rank);
  // Even split of the output features over `size` ranks (EvenShards).
  ColumnParallelLinearImpl(const at::Tensor& full_weight, const at::Tensor& full_bias, int rank,
                           int size);
  // Shard-first: reads only rank `rank`'s rows of src's `prefix`weight (and `prefix`bias when
  // `bias`), e.g. prefix "model.layers.0.self_attn.q_proj.".
  ColumnParallelLinearImpl(const TensorSource& src, const std::string& prefix, bool bias,
                           std::vector<ShardRange> rows, int rank);

  at::Tensor forward(const at::Tensor& x);  // [S, in] -> [S, out_r]

  std::vector<std::pair<std::string, ParamShard>> ParamShards() const override;

  at::Tensor weight;  // [out_r, in]
  at::Tensor bias;    // [out_r] or undefined

 private:
  ParamShard shard_;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module, public TpSharded {
 public:
  // full_weight: [out, in]; full_bias: [out] or undefined. cols[r]: the input features of TP
  // rank r = comm.rank() (a partition of [0, in)).
  RowParallelLinearImpl(const at::Tensor& full_weight, const at::Tensor& full_bias,
                        std::vector<ShardRange> cols, comm::Communicator& comm);
  // Even split of the input features over the group (EvenShards).
  RowParallelLinearImpl(const at::Tensor& full_weight, const at::Tensor& full_bias,
                        comm::Communicator& comm);
  // Shard-first: reads only this rank's columns of src's `prefix`weight (and the whole
  // `prefix`bias when `bias`).
  RowParallelLinearImpl(const TensorSource& src, const std::string& prefix, bool bias,
                        std::vector<ShardRange> cols, comm::Communicator& comm);

  at::Tensor forward(const at::Tensor& x);  // [S, in_r] -> [S, out] (all-reduced, + bias)

  std::vector<std::pair<std::string, ParamShard>> ParamShards() const override;

  at::Tensor weight;  // [out, in_r]
  at::Tensor bias;    // [out] (replicated) or undefined

 private:
  ParamShard shard_;
  comm::Communicator* comm_;
};
TORCH_MODULE(RowParallelLinear);

}  // namespace dhp::tp

#endif  // DHP_WORKER_PARALLEL_TP_LAYERS_H_
