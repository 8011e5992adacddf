#include "worker/parallel/tp_shard.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp::tp {

std::vector<ShardRange> EvenShards(int64_t n, int parts) {
  std::vector<ShardRange> out;
  if (parts <= 0) return out;
  const int64_t base = n / parts;
  const int64_t extra = n % parts;
  int64_t start = 0;
  for (int i = 0; i < parts; ++i) {
    const int64_t len = base + (i < extra ? 1 : 0);
    out.push_back({start, len});
    start += len;
  }
  return out;
}

int ParamShard::Holders(int rank) const {
  int n = 0;
  for (const ShardRange& r : ranges) n += (r == ranges[rank]) ? 1 : 0;
  return n;
}

bool ParamShard::HasReplicas() const {
  for (int r = 0; r < static_cast<int>(ranges.size()); ++r) {
    if (Holders(r) > 1) return true;
  }
  return false;
}

bool ParamShard::IsFirstHolder(int rank) const {
  for (int r = 0; r < rank; ++r) {
    if (ranges[r] == ranges[rank]) return false;
  }
  return true;
}

namespace {

std::vector<ShardRange> Scale(const std::vector<ShardRange>& heads, int64_t d) {
  std::vector<ShardRange> out;
  for (const ShardRange& h : heads) out.push_back({h.start * d, h.length * d});
  return out;
}

}  // namespace

std::vector<ShardRange> TextTpPlan::QRows() const { return Scale(q_heads, head_dim); }
std::vector<ShardRange> TextTpPlan::KvRows() const { return Scale(kv_heads, head_dim); }

std::vector<int> ValidTextTpDegrees(const TextConfig& c) {
  std::vector<int> out;
  for (int t = 1; t <= c.num_heads; ++t) {
    if (c.num_heads % t != 0) continue;
    if (c.num_kv_heads <= 0) continue;
    if (c.num_kv_heads % t == 0 || t % c.num_kv_heads == 0) out.push_back(t);
  }
  return out;
}

absl::Status ValidateTextTp(const TextConfig& c, int tp_size) {
  auto hint = [&] {
    return absl::StrCat(" (valid degrees: ", absl::StrJoin(ValidTextTpDegrees(c), ", "), ")");
  };
  if (tp_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("text tensor-parallel degree must be >= 1, got ", tp_size));
  }
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("text num_heads ", c.num_heads,
                                                   " must be a positive multiple of num_kv_heads ",
                                                   c.num_kv_heads));
  }
  if (c.num_heads % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("text tensor-parallel degree ", tp_size,
                                                   " must divide num_heads ", c.num_heads, hint()));
  }
  if (c.num_kv_heads % tp_size != 0 && tp_size % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text tensor-parallel degree ", tp_size, " must divide num_kv_heads ", c.num_kv_heads,
        " or be a multiple of it (KV heads are then replicated)", hint()));
  }
  if (c.intermediate_size < tp_size || c.vocab_size < tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("text tensor-parallel degree ", tp_size, " exceeds intermediate_size ",
                     c.intermediate_size, " or vocab_size ", c.vocab_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<TextTpPlan> MakeTextTpPlan(const TextConfig& c, int tp_size, int tp_rank) {
  if (absl::Status s = ValidateTextTp(c, tp_size); !s.ok()) return s;
  if (tp_rank < 0 || tp_rank >= tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("text TP rank ", tp_rank, " is outside [0, ", tp_size, ")"));
  }
  TextTpPlan p;
  p.tp_size = tp_size;
  p.tp_rank = tp_rank;
  p.head_dim = c.hidden_size / c.num_heads;
  p.q_heads = EvenShards(c.num_heads, tp_size);
  if (c.num_kv_heads % tp_size == 0) {
    p.kv_heads = EvenShards(c.num_kv_heads, tp_size);
    p.kv_replicas = 1;
  } else {
    p.kv_replicas = tp_size / c.num_kv_heads;
    for (int r = 0; r < tp_size; ++r) p.kv_heads.push_back({r / p.kv_replicas, 1});
  }
  p.intermediate = EvenShards(c.intermediate_size, tp_size);
  p.vocab = EvenShards(c.vocab_size, tp_size);
  return p;
}

}  // namespace dhp::tp
