// Tensor-parallel shard plans: which slice of each full (Hugging Face-shaped) parameter a TP rank
// holds, for the text decoder's Megatron layout. Pure C++ (no LibTorch), so the arithmetic is
// tested in milliseconds and shared by the spec validation, the TP modules and the benchmarks.
//
// Text decoder layout over a TP group of size T (rank r):
//   query heads       Hq / T per rank, contiguous: heads [r*Hq/T, (r+1)*Hq/T)
//   KV heads          split when T divides Hkv: heads [r*Hkv/T, (r+1)*Hkv/T), one holder each;
//                     replicated when Hkv divides T: rank r holds head r*Hkv/T, and each head is
//                     held by T/Hkv consecutive ranks. Either way every local query head's KV
//                     head (global q / (Hq/Hkv)) is local, so GQA works on local heads unchanged.
//   MLP columns       intermediate split as evenly as possible (the first ranks get one more)
//   vocabulary        split the same way (embedding rows, LM head rows, logits columns)
// Anything else is refused: Hq % T != 0, or neither Hkv % T == 0 nor T % Hkv == 0.
//
// Stateless and thread-safe.
#ifndef DHP_WORKER_PARALLEL_TP_SHARD_H_
#define DHP_WORKER_PARALLEL_TP_SHARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_presets.h"

namespace dhp::tp {

// A contiguous range [start, start + length) of one dimension.
struct ShardRange {
  int64_t start = 0;
  int64_t length = 0;
  int64_t end() const { return start + length; }
  bool operator==(const ShardRange& o) const { return start == o.start && length == o.length; }
};

// Balanced split of n into `parts` ranges in order; the first n % parts ranges get one more.
std::vector<ShardRange> EvenShards(int64_t n, int parts);

// How one parameter is laid out over the TP group: sharded along `dim` (0: rows, e.g. a
// column-parallel weight; 1: columns, a row-parallel weight) with `ranges[r]` the slice of TP
// rank r. Ranges may repeat (replicated KV heads): the ranks with the same range are "holders"
// of identical parameter values, and each holds only a partial gradient until the TP gradient
// sync sums them (tp_state.h). Parameters that every rank holds whole have no ParamShard.
struct ParamShard {
  int dim = 0;
  int64_t full_size = 0;           // extent of `dim` in the full tensor
  std::vector<ShardRange> ranges;  // one per TP rank

  // Ranks whose range equals ranges[rank] (>= 1).
  int Holders(int rank) const;
  // True when some range is held by more than one rank.
  bool HasReplicas() const;
  // True for the lowest rank holding its range (the one whose copy re-assembly keeps).
  bool IsFirstHolder(int rank) const;
};

// One rank's slice of the text decoder.
struct TextTpPlan {
  int tp_size = 1;
  int tp_rank = 0;
  int64_t head_dim = 0;
  std::vector<ShardRange> q_heads;       // per rank, in heads
  std::vector<ShardRange> kv_heads;      // per rank, in heads (repeats when replicated)
  std::vector<ShardRange> intermediate;  // per rank, MLP columns
  std::vector<ShardRange> vocab;         // per rank, vocabulary ids
  int kv_replicas = 1;                   // ranks holding each KV head

  // The same lists scaled by head_dim: rows of q_proj / k_proj / v_proj and columns of o_proj.
  std::vector<ShardRange> QRows() const;
  std::vector<ShardRange> KvRows() const;
  const ShardRange& my_vocab() const { return vocab[tp_rank]; }
};

// OK, or InvalidArgument naming the field, its value and what would work, e.g.
// "text tensor-parallel degree 3 must divide num_heads 4 (valid degrees: 1, 2, 4)".
absl::Status ValidateTextTp(const TextConfig& config, int tp_size);

absl::StatusOr<TextTpPlan> MakeTextTpPlan(const TextConfig& config, int tp_size, int tp_rank);

// The degrees ValidateTextTp accepts for `config`, ascending (for messages and the benchmarks).
std::vector<int> ValidTextTpDegrees(const TextConfig& config);

}  // namespace dhp::tp

#endif  // DHP_WORKER_PARALLEL_TP_SHARD_H_
