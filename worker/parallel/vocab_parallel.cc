#include "worker/parallel/vocab_parallel.h"

#include <c10/util/Exception.h>

#include <utility>

#include "worker/comm/autograd_collectives.h"

namespace dhp::tp {
namespace {

constexpr int64_t kIgnoreIndex = -100;

}  // namespace

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const at::Tensor& full_weight,
                                                       std::vector<ShardRange> ranges,
                                                       comm::Communicator& comm)
    : VocabParallelEmbeddingImpl(NamedTensorSource({{"weight", full_weight}}), "weight",
                                 std::move(ranges), comm) {}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const TensorSource& src,
                                                       const std::string& name,
                                                       std::vector<ShardRange> ranges,
                                                       comm::Communicator& comm)
    : rank_(comm.rank()), comm_(&comm) {
  const std::vector<int64_t> shape = src.Shape(name);
  TORCH_CHECK_VALUE(shape.size() == 2, "vocab-parallel embedding ", name,
                    " must be [vocab, H], got ", at::IntArrayRef(shape));
  TORCH_CHECK_VALUE(static_cast<int>(ranges.size()) == comm.size(),
                    "vocab-parallel embedding: ", ranges.size(), " ranges for a group of ",
                    comm.size());
  shard_ = ParamShard{0, shape[0], std::move(ranges)};
  const ShardRange& mine = shard_.ranges[rank_];
  weight = register_parameter("weight", src.Slice(name, 0, mine.start, mine.length));
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const at::Tensor& full_weight,
                                                       comm::Communicator& comm)
    : VocabParallelEmbeddingImpl(
          full_weight, EvenShards(full_weight.dim() == 2 ? full_weight.size(0) : 0, comm.size()),
          comm) {}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  if (comm_->size() == 1) return at::embedding(weight, ids);
  const ShardRange& r = range();
  at::Tensor outside = (ids < r.start).logical_or(ids >= r.end());  // [S]
  at::Tensor local_ids = (ids - r.start).masked_fill(outside, 0);   // [S]
  at::Tensor partial = at::embedding(weight, local_ids)             // [S, H]
                           .masked_fill(outside.unsqueeze(-1), 0.0);
  return comm::ReduceFromParallelRegion(partial, *comm_);  // [S, H]
}

std::vector<std::pair<std::string, ParamShard>> VocabParallelEmbeddingImpl::ParamShards() const {
  return {{"weight", shard_}};
}

at::Tensor CausalLmTargets(const at::Tensor& labels, const std::vector<int64_t>& cu_seqlens) {
  const int64_t s_len = labels.size(0);
  at::Tensor targets = at::full({s_len}, kIgnoreIndex, labels.options());  // [S]
  if (s_len > 1) targets.narrow(0, 0, s_len - 1).copy_(labels.narrow(0, 1, s_len - 1));
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    const int64_t last = cu_seqlens[i] - 1;
    if (last >= 0 && last < s_len) targets[last] = kIgnoreIndex;
  }
  return targets;
}

at::Tensor VocabParallelCrossEntropy(const at::Tensor& local_logits, const at::Tensor& targets,
                                     int64_t vocab_start, comm::Communicator& comm) {
  TORCH_CHECK_VALUE(
      local_logits.dim() == 2 && targets.dim() == 1 && local_logits.size(0) == targets.size(0),
      "vocab-parallel cross entropy: logits ", local_logits.sizes(), " and targets ",
      targets.sizes(), " must be [S, vocab_r] and [S]");
  const int64_t vocab_r = local_logits.size(1);
  at::Tensor logits = local_logits.to(at::kFloat);  // [S, V_r]

  at::Tensor max;  // [S], the max over the full vocabulary (a constant for autograd)
  {
    at::NoGradGuard no_grad;
    max = std::get<0>(logits.detach().max(/*dim=*/1)).contiguous();
    if (comm.size() > 1) {
      absl::Status s = comm.AllReduce(max, comm::ReduceOp::kMax);
      TORCH_CHECK(s.ok(), "vocab-parallel cross entropy: ", s.ToString());
    }
  }
  at::Tensor shifted = logits - max.unsqueeze(1);  // [S, V_r]
  at::Tensor sum_exp = shifted.exp().sum(1);       // [S]

  at::Tensor valid = targets != kIgnoreIndex;  // [S]
  at::Tensor local_t = targets - vocab_start;  // [S]
  at::Tensor mine = valid.logical_and(local_t >= 0).logical_and(local_t < vocab_r);
  at::Tensor idx = local_t.masked_fill(mine.logical_not(), 0).unsqueeze(1);  // [S, 1]
  at::Tensor target_logit =
      shifted.gather(1, idx).squeeze(1).masked_fill(mine.logical_not(), 0.0);  // [S]

  at::Tensor both = at::stack({sum_exp, target_logit}, 1);        // [S, 2]
  both = comm::ReduceFromParallelRegion(both, comm);              // [S, 2]
  at::Tensor loss = both.select(1, 0).log() - both.select(1, 1);  // [S]
  return loss.masked_fill(valid.logical_not(), 0.0);
}

std::pair<at::Tensor, at::Tensor> VocabParallelCausalLmLossSum(
    const at::Tensor& local_logits, const at::Tensor& labels,
    const std::vector<int64_t>& cu_seqlens, int64_t vocab_start, comm::Communicator& comm) {
  TORCH_CHECK_VALUE(
      labels.dim() == 1 && local_logits.dim() == 2 && local_logits.size(0) == labels.size(0),
      "loss: logits ", local_logits.sizes(), " and labels ", labels.sizes(),
      " must be [S, vocab_r] and [S]");
  at::Tensor targets = CausalLmTargets(labels, cu_seqlens);  // [S]
  at::Tensor per_token = VocabParallelCrossEntropy(local_logits, targets, vocab_start, comm);
  return {per_token.sum(), (targets != kIgnoreIndex).sum()};
}

}  // namespace dhp::tp
