#include "worker/parallel/text_tp_layout.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dhp::tp {

absl::StatusOr<std::map<std::string, ParamShard>> TextTpShardLayout(const TextConfig& config,
                                                                    int tp_size) {
  // Rank 0's plan lists every rank's ranges; only tp_rank differs between the ranks' plans.
  absl::StatusOr<TextTpPlan> plan = MakeTextTpPlan(config, tp_size, /*tp_rank=*/0);
  if (!plan.ok()) return plan.status();
  const int64_t q_size = static_cast<int64_t>(config.num_heads) * plan->head_dim;
  const int64_t kv_size = static_cast<int64_t>(config.num_kv_heads) * plan->head_dim;
  const ParamShard vocab{0, config.vocab_size, plan->vocab};
  const ParamShard q_rows{0, q_size, plan->QRows()};
  const ParamShard kv_rows{0, kv_size, plan->KvRows()};
  const ParamShard o_cols{1, q_size, plan->QRows()};
  const ParamShard mlp_rows{0, config.intermediate_size, plan->intermediate};
  const ParamShard mlp_cols{1, config.intermediate_size, plan->intermediate};

  std::map<std::string, ParamShard> out;
  out["model.embed_tokens.weight"] = vocab;
  for (int n = 0; n < config.num_layers; ++n) {
    const std::string attn = absl::StrCat("model.layers.", n, ".self_attn.");
    const std::string mlp = absl::StrCat("model.layers.", n, ".mlp.");
    for (const char* suffix : {"weight", "bias"}) {
      out[absl::StrCat(attn, "q_proj.", suffix)] = q_rows;
      out[absl::StrCat(attn, "k_proj.", suffix)] = kv_rows;
      out[absl::StrCat(attn, "v_proj.", suffix)] = kv_rows;
    }
    out[attn + "o_proj.weight"] = o_cols;
    out[mlp + "gate_proj.weight"] = mlp_rows;
    out[mlp + "up_proj.weight"] = mlp_rows;
    out[mlp + "down_proj.weight"] = mlp_cols;
  }
  if (!config.tie_word_embeddings) out["lm_head.weight"] = vocab;
  return out;
}

}  // namespace dhp::tp
