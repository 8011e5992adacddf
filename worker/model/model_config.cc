#include "worker/model/model_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp {
namespace {

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

}  // namespace

absl::Status ValidateModelConfig(const VisionConfig& v, const TextConfig& t) {
  const std::pair<const char*, int64_t> positive[] = {
      {"vision.depth", v.depth},
      {"vision.hidden_size", v.hidden_size},
      {"vision.num_heads", v.num_heads},
      {"vision.intermediate_size", v.intermediate_size},
      {"vision.in_channels", v.in_channels},
      {"vision.patch_size", v.patch_size},
      {"vision.temporal_patch_size", v.temporal_patch_size},
      {"vision.spatial_merge_size", v.spatial_merge_size},
      {"vision.window_size", v.window_size},
      {"vision.out_hidden_size", v.out_hidden_size},
      {"text.hidden_size", t.hidden_size},
      {"text.num_layers", t.num_layers},
      {"text.num_heads", t.num_heads},
      {"text.num_kv_heads", t.num_kv_heads},
      {"text.intermediate_size", t.intermediate_size},
      {"text.vocab_size", t.vocab_size},
  };
  for (const auto& [name, value] : positive) {
    if (value <= 0) return Invalid(absl::StrCat(name, " = ", value, ": must be positive"));
  }
  if (v.hidden_size % v.num_heads != 0 || VisionHeadDim(v) % 4 != 0) {
    return Invalid(absl::StrCat("vision.hidden_size = ", v.hidden_size,
                                " with vision.num_heads = ", v.num_heads,
                                ": head dim must be a whole multiple of 4 (2-D rotary halves)"));
  }
  const int unit_pixels = v.patch_size * v.spatial_merge_size;
  if (v.window_size % unit_pixels != 0) {
    return Invalid(
        absl::StrCat("vision.window_size = ", v.window_size,
                     ": must be a multiple of patch_size * spatial_merge_size = ", unit_pixels));
  }
  for (int idx : v.fullatt_block_indexes) {
    if (idx < 0 || idx >= v.depth) {
      return Invalid(absl::StrCat("vision.fullatt_block_indexes contains ", idx,
                                  ": must be in [0, depth = ", v.depth, ")"));
    }
  }
  if (v.out_hidden_size != t.hidden_size) {
    return Invalid(absl::StrCat("vision.out_hidden_size = ", v.out_hidden_size,
                                " must equal text.hidden_size = ", t.hidden_size));
  }
  if (t.hidden_size % t.num_heads != 0 || TextHeadDim(t) % 2 != 0) {
    return Invalid(absl::StrCat("text.hidden_size = ", t.hidden_size, " with text.num_heads = ",
                                t.num_heads, ": head dim must be a whole even number"));
  }
  if (t.num_heads % t.num_kv_heads != 0) {
    return Invalid(absl::StrCat("text.num_kv_heads = ", t.num_kv_heads,
                                ": must divide text.num_heads = ", t.num_heads));
  }
  int section_sum = 0;
  for (int s : t.mrope_section) {
    if (s < 0) return Invalid("text.mrope_section entries must be non-negative");
    section_sum += s;
  }
  if (section_sum * 2 != TextHeadDim(t)) {
    return Invalid(absl::StrCat("text.mrope_section = [", absl::StrJoin(t.mrope_section, ", "),
                                "] sums to ", section_sum,
                                ": must be head_dim / 2 = ", TextHeadDim(t) / 2));
  }
  return absl::OkStatus();
}

}  // namespace dhp
