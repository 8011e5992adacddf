#include "worker/model/hf_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dhp {
namespace {

// The published Qwen2.5-VL-7B-Instruct config.json (text fields at the top level).
constexpr char kSevenB[] = R"({
  "architectures": ["Qwen2_5_VLForConditionalGeneration"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "vision_start_token_id": 151652,
  "vision_end_token_id": 151653,
  "vision_token_id": 151654,
  "image_token_id": 151655,
  "video_token_id": 151656,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 128000,
  "max_window_layers": 28,
  "model_type": "qwen2_5_vl",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "use_sliding_window": false,
  "vision_config": {
    "depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
    "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14,
    "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2
  },
  "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
  "vocab_size": 152064
})";

TEST(HfConfigTest, PublishedSevenBMatchesPreset) {
  absl::StatusOr<ModelPreset> p = ParseHfConfig(kSevenB, "7b");
  ASSERT_TRUE(p.ok()) << p.status();
  const ModelPreset* want = FindModelPreset("qwen2_5_vl_7b");
  ASSERT_NE(want, nullptr);
  EXPECT_EQ(p->vision.depth, want->vision.depth);
  EXPECT_EQ(p->vision.hidden_size, want->vision.hidden_size);
  EXPECT_EQ(p->vision.fullatt_block_indexes, want->vision.fullatt_block_indexes);
  EXPECT_EQ(p->vision.out_hidden_size, 3584);
  EXPECT_EQ(p->text.hidden_size, want->text.hidden_size);
  EXPECT_EQ(p->text.num_layers, 28);
  EXPECT_EQ(p->text.num_heads, 28);
  EXPECT_EQ(p->text.num_kv_heads, 4);
  EXPECT_EQ(p->text.intermediate_size, 18944);
  EXPECT_EQ(p->text.vocab_size, 152064);
  EXPECT_FALSE(p->text.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(p->text.rope_theta, 1e6);
  EXPECT_EQ(p->text.mrope_section, (std::array<int, 3>{16, 24, 24}));
  EXPECT_EQ(p->tokens.image_pad, 151655);
  EXPECT_EQ(p->tokens.vision_start, 151652);
  EXPECT_EQ(p->tokens.im_end, 151645);
}

TEST(HfConfigTest, NestedTextConfigLayout) {
  constexpr char kNested[] = R"({
    "tie_word_embeddings": true,
    "image_token_id": 1005,
    "text_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1024,
                    "rope_theta": 10000.0,
                    "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
    "vision_config": {"depth": 4, "hidden_size": 64, "num_heads": 4, "intermediate_size": 128,
                      "out_hidden_size": 64, "fullatt_block_indexes": [1, 3]}
  })";
  absl::StatusOr<ModelPreset> p = ParseHfConfig(kNested, "nested");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->text.hidden_size, 64);
  EXPECT_EQ(p->text.num_kv_heads, 2);
  EXPECT_TRUE(p->text.tie_word_embeddings);
  EXPECT_EQ(p->text.mrope_section, (std::array<int, 3>{2, 3, 3}));
  EXPECT_EQ(p->vision.fullatt_block_indexes, (std::vector<int>{1, 3}));
  EXPECT_EQ(p->tokens.image_pad, 1005);
}

// What transformers 5.23's save_pretrained writes: rope_theta and mrope_section inside
// text_config.rope_parameters, and a vision rope_parameters without mrope_section.
TEST(HfConfigTest, Transformers5RopeParameters) {
  constexpr char kV5[] = R"({
    "tie_word_embeddings": false, "image_token_id": 1005, "vision_start_token_id": 1003,
    "text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 1024,
                    "rms_norm_eps": 1e-06, "bos_token_id": 1000, "eos_token_id": 1002,
                    "rope_parameters": {"mrope_section": [1, 1, 2], "rope_theta": 10000.0,
                                        "rope_type": "default"}},
    "vision_config": {"depth": 2, "hidden_size": 16, "num_heads": 2, "intermediate_size": 24,
                      "out_hidden_size": 32, "fullatt_block_indexes": [1], "window_size": 56,
                      "rope_parameters": {"rope_theta": 10000.0, "rope_type": "axial"}}
  })";
  absl::StatusOr<ModelPreset> p = ParseHfConfig(kV5, "v5");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->text.mrope_section, (std::array<int, 3>{1, 1, 2}));
  EXPECT_DOUBLE_EQ(p->text.rope_theta, 1e4);
  EXPECT_EQ(p->vision.window_size, 56);
  EXPECT_EQ(p->tokens.vision_start, 1003);

  std::string bad = kV5;
  bad.replace(bad.find("[1, 1, 2]"), 9, "[1, 1]");
  p = ParseHfConfig(bad, "x");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("text_config.rope_parameters.mrope_section has 2 entries"),
            std::string::npos)
      << p.status();
}

// Absent keys take transformers 5.23's defaults (configuration_qwen2_5_vl.py), not dhp's 7B
// struct defaults: a bare text config is the 72B one with rms_norm_eps 1e-5 and 32768 positions.
TEST(HfConfigTest, AbsentKeysTakeTransformersDefaults) {
  absl::StatusOr<ModelPreset> p =
      ParseHfConfig(R"({"vision_config": {"out_hidden_size": 8192}})", "d");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->text.hidden_size, 8192);
  EXPECT_EQ(p->text.num_layers, 80);
  EXPECT_EQ(p->text.num_heads, 64);
  EXPECT_EQ(p->text.num_kv_heads, 8);
  EXPECT_EQ(p->text.intermediate_size, 29568);
  EXPECT_EQ(p->text.vocab_size, 152064);
  EXPECT_DOUBLE_EQ(p->text.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(p->text.rope_theta, 1e6);
  EXPECT_EQ(p->text.max_position_embeddings, 32768);
  EXPECT_EQ(p->text.mrope_section, (std::array<int, 3>{16, 24, 24}));
  EXPECT_FALSE(p->text.tie_word_embeddings);
  EXPECT_EQ(p->vision.depth, 32);
  EXPECT_EQ(p->vision.hidden_size, 3584);
  EXPECT_EQ(p->vision.num_heads, 16);
  EXPECT_EQ(p->vision.intermediate_size, 3420);
  EXPECT_EQ(p->vision.window_size, 112);
  EXPECT_EQ(p->vision.fullatt_block_indexes, (std::vector<int>{7, 15, 23, 31}));
  EXPECT_EQ(p->tokens.image_pad, 151655);
  EXPECT_EQ(p->tokens.im_end, 151645);

  // Everything absent: the vision tower's 3584 outputs do not fit the 8192-wide text model,
  // which transformers would only find when running; dhp refuses it at once.
  p = ParseHfConfig("{}", "d");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("out_hidden_size"), std::string::npos) << p.status();
}

TEST(HfConfigTest, NullKvHeadsEosListAndTieInsideTextConfig) {
  absl::StatusOr<ModelPreset> p = ParseHfConfig(R"({
    "vision_config": {"out_hidden_size": 64, "hidden_size": 32, "num_heads": 2},
    "text_config": {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": null,
                    "tie_word_embeddings": true, "eos_token_id": [7, 8], "bos_token_id": 5,
                    "rope_parameters": {"mrope_section": [2, 3, 3]}},
    "tie_word_embeddings": false})",
                                                "n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->text.num_kv_heads, 4);        // null: one KV head per query head
  EXPECT_TRUE(p->text.tie_word_embeddings);  // transformers 5 honours a true left inside
  EXPECT_EQ(p->tokens.im_end, 7);
  EXPECT_EQ(p->tokens.endoftext, 5);
}

// Bytes no config author would write are refused with the field named, never converted.
TEST(HfConfigTest, OddValuesAreRefusedNotConverted) {
  const std::string base = R"({"vision_config": {"out_hidden_size": 64, "hidden_size": 32,
    "num_heads": 2}, "text_config": {"hidden_size": 64, "num_attention_heads": 4,
    "rope_parameters": {"mrope_section": [2, 3, 3]}, "num_hidden_layers": VALUE}})";
  for (const char* value : {"1e30", "2.5", "4294967298", "-9223372036854775809",
                            "18446744073709551615", "\"2\"", "true", "[2]", "{}"}) {
    std::string text = base;
    text.replace(text.find("VALUE"), 5, value);
    absl::StatusOr<ModelPreset> p = ParseHfConfig(text, "x");
    ASSERT_FALSE(p.ok()) << value;
    EXPECT_NE(p.status().message().find("text_config.num_hidden_layers = "), std::string::npos)
        << value << ": " << p.status();
  }
  std::string big_list = base;
  big_list.replace(big_list.find("[2, 3, 3]"), 9, "[2, 3, 3e9]");
  big_list.replace(big_list.find("VALUE"), 5, "2");
  const absl::Status list_status = ParseHfConfig(big_list, "x").status();
  EXPECT_NE(list_status.message().find("mrope_section = [2,3,3000000000.0] is not a list of "
                                       "integers"),
            std::string::npos)
      << list_status;
  std::string bad_utf8 = base;
  bad_utf8.replace(bad_utf8.find("VALUE"), 5, "2, \"name\": \"\xff\xfe\"");
  EXPECT_EQ(ParseHfConfig(bad_utf8, "x").status().message(), "config.json: not a JSON object");
  EXPECT_FALSE(ParseHfConfig("", "x").ok());
  EXPECT_FALSE(ParseHfConfig(std::string(100000, '['), "x").ok());
}

TEST(HfConfigTest, ErrorsNameTheField) {
  std::string bad_type = kSevenB;
  bad_type.replace(bad_type.find("\"depth\": 32"), 11, "\"depth\": \"x\"");
  absl::StatusOr<ModelPreset> p = ParseHfConfig(bad_type, "x");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("vision_config.depth"), std::string::npos) << p.status();

  std::string bad_rope = kSevenB;
  bad_rope.replace(bad_rope.find("[16, 24, 24]"), 12, "[16, 24, 25]");
  p = ParseHfConfig(bad_rope, "x");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("mrope_section"), std::string::npos) << p.status();

  EXPECT_FALSE(ParseHfConfig("[1, 2]", "x").ok());
  EXPECT_FALSE(ParseHfConfig("{not json", "x").ok());
}

TEST(HfConfigTest, LoadsFromCheckpointDirectory) {
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "hf_config_test_checkpoint";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    out << kSevenB;
  }
  absl::StatusOr<ModelPreset> p = LoadHfConfig(dir.string());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->text.hidden_size, 3584);
  absl::StatusOr<ModelPreset> none = LoadHfConfig((dir / "nope").string());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

// The written config of every preset reads back as the same architecture, in both dtypes, and
// carries what transformers needs to pick the model class and the weights' dtype.
TEST(HfConfigTest, WrittenPresetConfigsReadBackExactly) {
  for (const std::string& name : ModelPresetNames()) {
    const ModelPreset& preset = *FindModelPreset(name);
    for (const char* dtype : {"float32", "bfloat16"}) {
      const std::string text = HfConfigJson(preset, dtype);
      absl::StatusOr<ModelPreset> back = ParseHfConfig(text, name);
      ASSERT_TRUE(back.ok()) << name << ": " << back.status();
      EXPECT_EQ(DiffModelPresets(preset, *back), std::vector<std::string>{}) << name;
      EXPECT_NE(text.find(absl::StrCat("\"torch_dtype\": \"", dtype, "\"")), std::string::npos);
    }
    const std::string text = HfConfigJson(preset, "float32");
    EXPECT_NE(text.find("\"architectures\": [\n    \"Qwen2_5_VLForConditionalGeneration\"\n  ]"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\"model_type\": \"qwen2_5_vl\""), std::string::npos);
  }
  // The tiny preset's values, as transformers will read them.
  const std::string tiny = HfConfigJson(*FindModelPreset("tiny"), "float32");
  for (const char* want : {"\"hidden_size\": 64", "\"vocab_size\": 1024", "\"rope_theta\": 10000.0",
                           "\"image_token_id\": 1005", "\"eos_token_id\": 1002",
                           "\"fullatt_block_indexes\": [\n      1,\n      3\n    ]"}) {
    EXPECT_NE(tiny.find(want), std::string::npos) << want << " in " << tiny;
  }
  // An unknown id (e.g. from a config.json that lacks it) is left out, not written as -1.
  ModelPreset unknown = *FindModelPreset("tiny");
  unknown.tokens.vision_start = -1;
  EXPECT_EQ(HfConfigJson(unknown, "float32").find("vision_start_token_id"), std::string::npos);
}

}  // namespace
}  // namespace dhp
