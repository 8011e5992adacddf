#include "worker/parallel/tp_layers.h"

#include <c10/util/Exception.h>

#include "worker/comm/autograd_collectives.h"

namespace dhp::tp {
namespace {

ParamShard MakeShard(int dim, int64_t full_size, std::vector<ShardRange> ranges, int rank,
                     const char* what) {
  TORCH_CHECK_VALUE(rank >= 0 && rank < static_cast<int64_t>(ranges.size()), what, ": rank ", rank,
                    " has no range (", ranges.size(), " given)");
  for (const ShardRange& r : ranges) {
    TORCH_CHECK_VALUE(r.start >= 0 && r.length >= 0 && r.end() <= full_size, what, ": range [",
                      r.start, ", ", r.end(), ") is outside [0, ", full_size, ")");
  }
  return ParamShard{dim, full_size, std::move(ranges)};
}

}  // namespace

ShardLayout CollectShardLayout(const torch::nn::Module& root) {
  ShardLayout layout;
  auto add = [&layout](const torch::nn::Module* m, const std::string& prefix) {
    const auto* sharded = dynamic_cast<const TpSharded*>(m);
    if (sharded == nullptr) return;
    for (auto& [name, shard] : sharded->ParamShards()) layout[prefix + name] = shard;
  };
  // include_self would need shared_from_this(), which a module under construction lacks.
  add(&root, "");
  for (const auto& item : root.named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    add(item.value().get(), item.key() + ".");
  }
  return layout;
}

at::Tensor ShardOf(const at::Tensor& full, int64_t dim, const ShardRange& range) {
  at::NoGradGuard no_grad;
  return full.detach().narrow(dim, range.start, range.length).clone(at::MemoryFormat::Contiguous);
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const at::Tensor& full_weight,
                                                   const at::Tensor& full_bias,
                                                   std::vector<ShardRange> rows, int rank) {
  TORCH_CHECK_VALUE(full_weight.dim() == 2, "column-parallel weight must be [out, in], got ",
                    full_weight.sizes());
  shard_ = MakeShard(0, full_weight.size(0), std::move(rows), rank, "column-parallel linear");
  const ShardRange& mine = shard_.ranges[rank];
  weight = register_parameter("weight", ShardOf(full_weight, 0, mine));
  if (full_bias.defined()) {
    TORCH_CHECK_VALUE(full_bias.dim() == 1 && full_bias.size(0) == full_weight.size(0),
                      "column-parallel bias must be [", full_weight.size(0), "], got ",
                      full_bias.sizes());
    bias = register_parameter("bias", ShardOf(full_bias, 0, mine));
  }
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const at::Tensor& full_weight,
                                                   const at::Tensor& full_bias, int rank, int size)
    : ColumnParallelLinearImpl(full_weight, full_bias,
                               EvenShards(full_weight.dim() == 2 ? full_weight.size(0) : 0, size),
                               rank) {}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  return at::linear(x, weight, bias);  // [S, out_r]
}

std::vector<std::pair<std::string, ParamShard>> ColumnParallelLinearImpl::ParamShards() const {
  std::vector<std::pair<std::string, ParamShard>> out = {{"weight", shard_}};
  if (bias.defined()) out.emplace_back("bias", shard_);
  return out;
}

RowParallelLinearImpl::RowParallelLinearImpl(const at::Tensor& full_weight,
                                             const at::Tensor& full_bias,
                                             std::vector<ShardRange> cols, comm::Communicator& comm)
    : comm_(&comm) {
  TORCH_CHECK_VALUE(full_weight.dim() == 2, "row-parallel weight must be [out, in], got ",
                    full_weight.sizes());
  TORCH_CHECK_VALUE(static_cast<int>(cols.size()) == comm.size(),
                    "row-parallel linear: ", cols.size(), " ranges for a group of ", comm.size());
  const int rank = comm.rank();
  shard_ = MakeShard(1, full_weight.size(1), std::move(cols), rank, "row-parallel linear");
  weight = register_parameter("weight", ShardOf(full_weight, 1, shard_.ranges[rank]));
  if (full_bias.defined()) {
    TORCH_CHECK_VALUE(full_bias.dim() == 1 && full_bias.size(0) == full_weight.size(0),
                      "row-parallel bias must be [", full_weight.size(0), "], got ",
                      full_bias.sizes());
    bias = register_parameter("bias", full_bias.detach().clone());
  }
}

RowParallelLinearImpl::RowParallelLinearImpl(const at::Tensor& full_weight,
                                             const at::Tensor& full_bias, comm::Communicator& comm)
    : RowParallelLinearImpl(
          full_weight, full_bias,
          EvenShards(full_weight.dim() == 2 ? full_weight.size(1) : 0, comm.size()), comm) {}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = comm::ReduceFromParallelRegion(at::linear(x, weight), *comm_);  // [S, out]
  return bias.defined() ? y + bias : y;
}

std::vector<std::pair<std::string, ParamShard>> RowParallelLinearImpl::ParamShards() const {
  return {{"weight", shard_}};
}

}  // namespace dhp::tp
