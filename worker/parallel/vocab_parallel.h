// Vocabulary parallelism for the text stage: the embedding table, the LM head and the cross
// entropy are sharded by vocabulary id over the TP group, so no rank ever holds [S, vocab]
// logits (each holds [S, vocab_r], its slice of columns).
//
//   VocabParallelEmbedding   rank r holds rows ranges[r] of the [vocab, H] table; ids outside
//                            its range look up row 0 and are zeroed, then the partial lookups
//                            are summed (comm::ReduceFromParallelRegion: all-reduce forward,
//                            identity backward). Output [S, H], complete on every rank.
//   VocabParallelCrossEntropy  Megatron's: per token, the max over the full vocabulary
//                            (all-reduce max of the local maxima, [S] fp32, no gradient: the
//                            result does not depend on the shift), then one all-reduce (sum) of
//                            [S, 2] fp32 holding the local sum of exp(logit - max) and the target
//                            logit (nonzero only on the rank whose slice holds the target).
//                            loss = log(sum_exp) - (target_logit - max). Backward needs no
//                            collective: the reduced values feed a loss computed identically on
//                            every rank, so each rank's local terms get the gradient as is.
//
// Collectives per call (group size T > 1; none when T == 1): embedding forward 1 all-reduce of
// S*H elements of the table's dtype; cross entropy forward 1 all-reduce of S fp32 (max) + 1 of
// 2*S fp32 (sum-exp, target logit); no backward collectives.
//
// Thread-safety: not thread-safe (one rank's training thread); the Communicator is borrowed and
// must outlive the module / the backward pass.
#ifndef DHP_WORKER_PARALLEL_VOCAB_PARALLEL_H_
#define DHP_WORKER_PARALLEL_VOCAB_PARALLEL_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <utility>
#include <vector>

#include "worker/comm/communicator.h"
#include "worker/parallel/tp_layers.h"
#include "worker/parallel/tp_shard.h"

namespace dhp::tp {

class VocabParallelEmbeddingImpl : public torch::nn::Module, public TpSharded {
 public:
  // full_weight: [vocab, H]; ranges[r]: vocabulary ids of TP rank r = comm.rank() (a partition
  // of [0, vocab)).
  VocabParallelEmbeddingImpl(const at::Tensor& full_weight, std::vector<ShardRange> ranges,
                             comm::Communicator& comm);
  // Even split of the vocabulary over the group (EvenShards).
  VocabParallelEmbeddingImpl(const at::Tensor& full_weight, comm::Communicator& comm);
  // Shard-first: reads only this rank's rows of src's `name` ([vocab, H]).
  VocabParallelEmbeddingImpl(const TensorSource& src, const std::string& name,
                             std::vector<ShardRange> ranges, comm::Communicator& comm);

  at::Tensor forward(const at::Tensor& ids);  // [S] int64 -> [S, H]

  std::vector<std::pair<std::string, ParamShard>> ParamShards() const override;
  const ShardRange& range() const { return shard_.ranges[rank_]; }

  at::Tensor weight;  // [vocab_r, H], "weight"

 private:
  ParamShard shard_;
  int rank_;
  comm::Communicator* comm_;
};
TORCH_MODULE(VocabParallelEmbedding);

// Next-token targets of a packed sequence, as CausalLmLossSum (text_model.h) defines them:
// targets[i] = labels[i + 1] when i + 1 is in the same sample, -100 at the last token of every
// sample. labels: [S] int64 (-100 = ignored); cu_seqlens: sample bounds (empty = one sample).
at::Tensor CausalLmTargets(const at::Tensor& labels, const std::vector<int64_t>& cu_seqlens);

// Per-token cross entropy [S] fp32 (0 where targets == -100) from vocab-sharded logits.
// local_logits: [S, vocab_r] (any float dtype; computed in fp32), the columns
// [vocab_start, vocab_start + vocab_r) of the full logits; targets: [S] int64 global ids.
at::Tensor VocabParallelCrossEntropy(const at::Tensor& local_logits, const at::Tensor& targets,
                                     int64_t vocab_start, comm::Communicator& comm);

// CausalLmLossSum over vocab-sharded logits: (sum [] fp32, count [] int64), equal on every rank.
std::pair<at::Tensor, at::Tensor> VocabParallelCausalLmLossSum(
    const at::Tensor& local_logits, const at::Tensor& labels,
    const std::vector<int64_t>& cu_seqlens, int64_t vocab_start, comm::Communicator& comm);

}  // namespace dhp::tp

#endif  // DHP_WORKER_PARALLEL_VOCAB_PARALLEL_H_
