#include "worker/rank/step_flops.h"

#include "absl/strings/str_cat.h"
#include "worker/model/model_config.h"

namespace dhp {
namespace {

// Sum over segments of 4 * L^2 * width (QK^T and PV of one attention layer).
int64_t AttentionFlops(const std::vector<int64_t>& cu, int64_t width) {
  int64_t f = 0;
  for (size_t i = 1; i < cu.size(); ++i) {
    const int64_t l = cu[i] - cu[i - 1];
    f += 4 * l * l * width;
  }
  return f;
}

}  // namespace

absl::StatusOr<StepFlops> CountStepFlops(const ModelPreset& model,
                                         const std::vector<GridThw>& images,
                                         const std::vector<int64_t>& sample_lengths) {
  StepFlops f;
  const VisionConfig& v = model.vision;
  const TextConfig& t = model.text;

  if (!images.empty()) {
    absl::StatusOr<VisionWindowPlan> plan = MakeVisionWindowPlan(images, v);
    if (!plan.ok()) return plan.status();
    const int64_t hv = v.hidden_size, iv = v.intermediate_size;
    const int64_t patches = plan->num_patches;
    const int64_t merged_tokens = patches / MergeUnit(v);
    const int64_t mv = hv * MergeUnit(v);
    const int64_t per_block = 2 * hv * 3 * hv + 2 * hv * hv + 3 * 2 * hv * iv;
    f.vision_linear = patches * (2 * int64_t{PatchDim(v)} * hv + v.depth * per_block) +
                      merged_tokens * (2 * mv * mv + 2 * mv * v.out_hidden_size);
    const int64_t attn_width = int64_t{v.num_heads} * VisionHeadDim(v);
    for (int b = 0; b < v.depth; ++b) {
      bool full = false;
      for (int i : v.fullatt_block_indexes) full = full || i == b;
      f.vision_attention +=
          AttentionFlops(full ? plan->cu_seqlens : plan->cu_window_seqlens, attn_width);
    }
  }

  const int64_t h = t.hidden_size;
  const int64_t q = int64_t{t.num_heads} * TextHeadDim(t);
  const int64_t kv = int64_t{t.num_kv_heads} * TextHeadDim(t);
  const int64_t per_token = t.num_layers * (2 * h * q + 2 * 2 * h * kv + 2 * q * h +
                                            3 * 2 * h * int64_t{t.intermediate_size}) +
                            2 * h * t.vocab_size;
  std::vector<int64_t> cu = {0};
  for (int64_t l : sample_lengths) {
    if (l <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("step flops: sample length ", l, " must be positive"));
    }
    cu.push_back(cu.back() + l);
  }
  f.text_linear = cu.back() * per_token;
  f.text_attention = t.num_layers * AttentionFlops(cu, q);
  return f;
}

}  // namespace dhp
