#include "worker/model/hf_config.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/model_config.h"

namespace dhp {
namespace {

using nlohmann::json;

// Whether `v` holds a T exactly: a boolean for bool, an integer in range for integer types, a
// number for double, a string for std::string, an array of such for std::vector.
template <typename T>
bool Fits(const json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    }
    return v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<T>::min() &&
           v.get<int64_t>() <= std::numeric_limits<T>::max();
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else {
    if (!v.is_array()) return false;
    for (const json& e : v) {
      if (!Fits<typename T::value_type>(e)) return false;
    }
    return true;
  }
}

template <typename T>
std::string Expected() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return absl::StrCat("an integer in [", std::numeric_limits<T>::min(), ", ",
                        std::numeric_limits<T>::max(), "]");
  }
  if constexpr (std::is_floating_point_v<T>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  return "a list of integers";
}

// Reads `obj[key]` into `*out` when present. `where` names the object for messages
// ("vision_config."); `required` turns absence into an error.
template <typename T>
absl::Status Read(const json& obj, const std::string& where, const char* key, bool required,
                  T* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", where, key, " is missing"));
  }
  // nlohmann converts any number to any arithmetic type (1e30 or 2.5 to int, 4294967360 wraps
  // to 64): the JSON type and the range are checked first.
  if (!Fits<T>(*it)) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", where, key, " = ",
                                                   it->dump(), " is not ", Expected<T>()));
  }
  try {
    *out = it->get<T>();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", where, key, " = ", it->dump(),
                                                   " has the wrong type: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status CheckActivation(const json& obj, const std::string& where) {
  std::string act = "silu";
  DHP_RETURN_IF_ERROR(Read(obj, where, "hidden_act", false, &act));
  if (act != "silu") {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", where, "hidden_act = \"", act,
                                                   "\": only \"silu\" is supported"));
  }
  return absl::OkStatus();
}

absl::Status ParseVision(const json& vj, VisionConfig* v) {
  const std::string w = "vision_config.";
  DHP_RETURN_IF_ERROR(CheckActivation(vj, w));
  DHP_RETURN_IF_ERROR(Read(vj, w, "depth", false, &v->depth));
  DHP_RETURN_IF_ERROR(Read(vj, w, "hidden_size", false, &v->hidden_size));
  DHP_RETURN_IF_ERROR(Read(vj, w, "num_heads", false, &v->num_heads));
  DHP_RETURN_IF_ERROR(Read(vj, w, "intermediate_size", false, &v->intermediate_size));
  DHP_RETURN_IF_ERROR(Read(vj, w, "out_hidden_size", false, &v->out_hidden_size));
  // Published configs write "in_chans" (and sometimes also "in_channels").
  DHP_RETURN_IF_ERROR(Read(vj, w, "in_chans", false, &v->in_channels));
  DHP_RETURN_IF_ERROR(Read(vj, w, "in_channels", false, &v->in_channels));
  DHP_RETURN_IF_ERROR(Read(vj, w, "patch_size", false, &v->patch_size));
  DHP_RETURN_IF_ERROR(Read(vj, w, "temporal_patch_size", false, &v->temporal_patch_size));
  DHP_RETURN_IF_ERROR(Read(vj, w, "spatial_merge_size", false, &v->spatial_merge_size));
  DHP_RETURN_IF_ERROR(Read(vj, w, "window_size", false, &v->window_size));
  DHP_RETURN_IF_ERROR(Read(vj, w, "fullatt_block_indexes", false, &v->fullatt_block_indexes));
  DHP_RETURN_IF_ERROR(Read(vj, w, "rms_norm_eps", false, &v->rms_norm_eps));
  return absl::OkStatus();
}

absl::Status ParseText(const json& tj, const std::string& w, TextConfig* t) {
  DHP_RETURN_IF_ERROR(CheckActivation(tj, w));
  DHP_RETURN_IF_ERROR(Read(tj, w, "hidden_size", false, &t->hidden_size));
  DHP_RETURN_IF_ERROR(Read(tj, w, "num_hidden_layers", false, &t->num_layers));
  DHP_RETURN_IF_ERROR(Read(tj, w, "num_attention_heads", false, &t->num_heads));
  DHP_RETURN_IF_ERROR(Read(tj, w, "intermediate_size", false, &t->intermediate_size));
  DHP_RETURN_IF_ERROR(Read(tj, w, "vocab_size", false, &t->vocab_size));
  // transformers: 8 when the key is absent, the query head count when it is null.
  auto kv = tj.find("num_key_value_heads");
  if (kv != tj.end() && kv->is_null()) t->num_kv_heads = t->num_heads;
  DHP_RETURN_IF_ERROR(Read(tj, w, "num_key_value_heads", false, &t->num_kv_heads));
  DHP_RETURN_IF_ERROR(Read(tj, w, "tie_word_embeddings", false, &t->tie_word_embeddings));
  DHP_RETURN_IF_ERROR(Read(tj, w, "rms_norm_eps", false, &t->rms_norm_eps));
  DHP_RETURN_IF_ERROR(Read(tj, w, "rope_theta", false, &t->rope_theta));
  DHP_RETURN_IF_ERROR(Read(tj, w, "max_position_embeddings", false, &t->max_position_embeddings));
  // transformers 4.x writes "rope_scaling" (mrope_section) beside "rope_theta"; transformers 5
  // writes "rope_parameters" holding both.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto rs = tj.find(key);
    if (rs == tj.end() || !rs->is_object()) continue;
    const std::string where = absl::StrCat(w, key, ".");
    DHP_RETURN_IF_ERROR(Read(*rs, where, "rope_theta", false, &t->rope_theta));
    if (!rs->contains("mrope_section")) continue;
    std::vector<int> section;
    DHP_RETURN_IF_ERROR(Read(*rs, where, "mrope_section", true, &section));
    if (section.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", where, "mrope_section has ",
                                                     section.size(),
                                                     " entries: expected 3 (t, h, w)"));
    }
    t->mrope_section = {section[0], section[1], section[2]};
  }
  return absl::OkStatus();
}

// transformers' defaults (Qwen2_5_VLVisionConfig, Qwen2_5_VLTextConfig and Qwen2_5_VLConfig in
// transformers 5.23) for every key a config.json may leave out. They are not the 7B values that
// dhp's config structs default to: a bare text config is the 72B one, with rms_norm_eps 1e-5.
ModelPreset TransformersDefaults() {
  ModelPreset p;
  VisionConfig& v = p.vision;
  v.depth = 32;
  v.hidden_size = 3584;
  v.num_heads = 16;
  v.intermediate_size = 3420;
  v.in_channels = 3;
  v.patch_size = 14;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.window_size = 112;
  v.fullatt_block_indexes = {7, 15, 23, 31};
  v.out_hidden_size = 3584;
  v.rms_norm_eps = 1e-6;  // fixed in the vision tower's code, not a config key
  TextConfig& t = p.text;
  t.vocab_size = 152064;
  t.hidden_size = 8192;
  t.intermediate_size = 29568;
  t.num_layers = 80;
  t.num_heads = 64;
  t.num_kv_heads = 8;
  t.rms_norm_eps = 1e-5;
  t.rope_theta = 1000000.0;
  t.mrope_section = {16, 24, 24};
  t.max_position_embeddings = 32768;
  t.tie_word_embeddings = false;
  p.tokens = SpecialTokens{};  // 151643 .. 151656, the official ids
  p.tokens.im_start = -1;      // not a config.json key: unknown (the tokenizer has it)
  return p;
}

}  // namespace

absl::StatusOr<ModelPreset> ParseHfConfig(const std::string& json_text, const std::string& name) {
  json root = json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("config.json: not a JSON object");
  }
  ModelPreset p = TransformersDefaults();
  p.name = name;
  auto vj = root.find("vision_config");
  if (vj != root.end() && !vj->is_null()) {
    if (!vj->is_object()) {
      return absl::InvalidArgumentError("config.json: vision_config is not an object");
    }
    DHP_RETURN_IF_ERROR(ParseVision(*vj, &p.vision));
  }

  // The text fields are under text_config (transformers 5), or at the top level (the published
  // checkpoints), where a text_config may also appear without the sizes.
  auto tj = root.find("text_config");
  const bool nested = tj != root.end() && tj->is_object() &&
                      (tj->contains("hidden_size") || !root.contains("hidden_size"));
  const json& text = nested ? *tj : root;
  const std::string where = nested ? "text_config." : "";
  DHP_RETURN_IF_ERROR(ParseText(text, where, &p.text));
  // The top-level value counts; a true one inside text_config (transformers 4 saves) ties too.
  bool tied = false;
  DHP_RETURN_IF_ERROR(Read(root, "", "tie_word_embeddings", false, &tied));
  p.text.tie_word_embeddings = tied || p.text.tie_word_embeddings;

  SpecialTokens& s = p.tokens;
  for (const auto& [obj, w] : {std::pair<const json*, std::string>{&text, where}, {&root, ""}}) {
    DHP_RETURN_IF_ERROR(Read(*obj, w, "bos_token_id", false, &s.endoftext));
    // eos_token_id may be a list (transformers allows int | list): the first is <|im_end|>.
    auto eos = obj->find("eos_token_id");
    const bool list = eos != obj->end() && eos->is_array() && !eos->empty();
    const json first = list ? json{{"eos_token_id", (*eos)[0]}} : json::object();
    DHP_RETURN_IF_ERROR(Read(list ? first : *obj, w, "eos_token_id", false, &s.im_end));
  }
  DHP_RETURN_IF_ERROR(Read(root, "", "vision_start_token_id", false, &s.vision_start));
  DHP_RETURN_IF_ERROR(Read(root, "", "vision_end_token_id", false, &s.vision_end));
  DHP_RETURN_IF_ERROR(Read(root, "", "image_token_id", false, &s.image_pad));
  DHP_RETURN_IF_ERROR(Read(root, "", "video_token_id", false, &s.video_pad));

  absl::Status valid = ValidateModelConfig(p.vision, p.text);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", valid.message()));
  }
  return p;
}

absl::StatusOr<ModelPreset> LoadHfConfig(const std::string& path) {
  std::filesystem::path file(path);
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) file /= "config.json";
  std::ifstream in(file);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", file.string(),
                                            ": pass a config.json or a checkpoint directory"));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ModelPreset> p = ParseHfConfig(text.str(), path);
  if (!p.ok()) {
    return absl::Status(p.status().code(), absl::StrCat(file.string(), ": ", p.status().message()));
  }
  return p;
}

std::string HfConfigJson(const ModelPreset& preset, const std::string& torch_dtype) {
  const VisionConfig& v = preset.vision;
  const TextConfig& t = preset.text;
  const SpecialTokens& s = preset.tokens;
  nlohmann::ordered_json vision = {
      {"depth", v.depth},
      {"hidden_act", "silu"},
      {"hidden_size", v.hidden_size},
      {"intermediate_size", v.intermediate_size},
      {"num_heads", v.num_heads},
      {"in_chans", v.in_channels},  // the published configs' key; transformers reads in_channels
      {"in_channels", v.in_channels},
      {"out_hidden_size", v.out_hidden_size},
      {"patch_size", v.patch_size},
      {"spatial_merge_size", v.spatial_merge_size},
      {"temporal_patch_size", v.temporal_patch_size},
      {"window_size", v.window_size},
      {"fullatt_block_indexes", v.fullatt_block_indexes},
      {"tokens_per_second", 2},  // the published value (video positions only)
  };
  nlohmann::ordered_json c = {
      {"architectures", {"Qwen2_5_VLForConditionalGeneration"}},
      {"model_type", "qwen2_5_vl"},
      {"torch_dtype", torch_dtype},
      {"hidden_act", "silu"},
      {"hidden_size", t.hidden_size},
      {"intermediate_size", t.intermediate_size},
      {"num_hidden_layers", t.num_layers},
      {"num_attention_heads", t.num_heads},
      {"num_key_value_heads", t.num_kv_heads},
      {"vocab_size", t.vocab_size},
      {"max_position_embeddings", t.max_position_embeddings},
      {"rms_norm_eps", t.rms_norm_eps},
      {"rope_theta", t.rope_theta},
      {"rope_scaling",
       {{"type", "mrope"},
        {"mrope_section", {t.mrope_section[0], t.mrope_section[1], t.mrope_section[2]}}}},
      {"tie_word_embeddings", t.tie_word_embeddings},
      {"attention_dropout", 0.0},
      {"use_cache", true},
      {"use_sliding_window", false},
  };
  const std::pair<const char*, int64_t> ids[] = {
      {"bos_token_id", s.endoftext},        {"eos_token_id", s.im_end},
      {"vision_start_token_id", s.vision_start}, {"vision_end_token_id", s.vision_end},
      {"image_token_id", s.image_pad},       {"video_token_id", s.video_pad}};
  for (const auto& [key, id] : ids) {
    if (id >= 0) c[key] = id;
  }
  c["vision_config"] = std::move(vision);
  return c.dump(2) + "\n";
}

}  // namespace dhp
