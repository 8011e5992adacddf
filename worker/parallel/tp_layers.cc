#include "worker/parallel/tp_layers.h"

#include <c10/util/Exception.h>

#include <utility>

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
                                                   std::vector<ShardRange> rows, int rank)
    : ColumnParallelLinearImpl(NamedTensorSource({{"weight", full_weight}, {"bias", full_bias}}),
                               "", full_bias.defined(), std::move(rows), rank) {}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const TensorSource& src,
                                                   const std::string& prefix, bool bias_too,
                                                   std::vector<ShardRange> rows, int rank) {
  const std::vector<int64_t> shape = src.Shape(prefix + "weight");
  TORCH_CHECK_VALUE(shape.size() == 2, "column-parallel weight ", prefix,
                    "weight must be [out, in], got ", at::IntArrayRef(shape));
  shard_ = MakeShard(0, shape[0], std::move(rows), rank, "column-parallel linear");
  const ShardRange& mine = shard_.ranges[rank];
  weight = register_parameter("weight", src.Slice(prefix + "weight", 0, mine.start, mine.length));
  if (bias_too) {
    const std::vector<int64_t> b = src.Shape(prefix + "bias");
    TORCH_CHECK_VALUE(b.size() == 1 && b[0] == shape[0], "column-parallel bias ", prefix,
                      "bias must be [", shape[0], "], got ", at::IntArrayRef(b));
    bias = register_parameter("bias", src.Slice(prefix + "bias", 0, mine.start, mine.length));
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
    : RowParallelLinearImpl(NamedTensorSource({{"weight", full_weight}, {"bias", full_bias}}), "",
                            full_bias.defined(), std::move(cols), comm) {}

RowParallelLinearImpl::RowParallelLinearImpl(const TensorSource& src, const std::string& prefix,
                                             bool bias_too, std::vector<ShardRange> cols,
                                             comm::Communicator& comm)
    : comm_(&comm) {
  const std::vector<int64_t> shape = src.Shape(prefix + "weight");
  TORCH_CHECK_VALUE(shape.size() == 2, "row-parallel weight ", prefix,
                    "weight must be [out, in], got ", at::IntArrayRef(shape));
  TORCH_CHECK_VALUE(static_cast<int>(cols.size()) == comm.size(),
                    "row-parallel linear: ", cols.size(), " ranges for a group of ", comm.size());
  const int rank = comm.rank();
  shard_ = MakeShard(1, shape[1], std::move(cols), rank, "row-parallel linear");
  const ShardRange& mine = shard_.ranges[rank];
  weight = register_parameter("weight", src.Slice(prefix + "weight", 1, mine.start, mine.length));
  if (bias_too) {
    const std::vector<int64_t> b = src.Shape(prefix + "bias");
    TORCH_CHECK_VALUE(b.size() == 1 && b[0] == shape[0], "row-parallel bias ", prefix,
                      "bias must be [", shape[0], "], got ", at::IntArrayRef(b));
    bias = register_parameter("bias", src.Whole(prefix + "bias"));
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
