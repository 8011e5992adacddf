// Every official preset equals its published config.json, field by field. The values below are
// data copied from the config.json of Qwen/Qwen2.5-VL-{3B,7B,32B,72B}-Instruct on the Hugging
// Face Hub (as recorded in ../shared/reference/qwen2_5_vl.md); a preset that drifts from them
// would fail strict loading of the official weights (the 32B and 72B vision MLP width, 3456, is
// the case this test was written for).
#include "common/model_presets.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace dhp {
namespace {

struct Published {
  const char* preset;
  int hidden, layers, heads, kv_heads, mlp;
  int64_t vocab;
  bool tied;
  int vision_mlp;
};

// text hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
// intermediate_size, vocab_size, tie_word_embeddings, vision_config.intermediate_size.
const Published kPublished[] = {
    {"qwen2_5_vl_3b", 2048, 36, 16, 2, 11008, 151936, true, 3420},
    {"qwen2_5_vl_7b", 3584, 28, 28, 4, 18944, 152064, false, 3420},
    {"qwen2_5_vl_32b", 5120, 64, 40, 8, 27648, 152064, false, 3456},
    {"qwen2_5_vl_72b", 8192, 80, 64, 8, 29568, 152064, false, 3456},
};

class PublishedConfigTest : public ::testing::TestWithParam<Published> {};

TEST_P(PublishedConfigTest, PresetEqualsConfigJson) {
  const Published& want = GetParam();
  const ModelPreset* p = FindModelPreset(want.preset);
  ASSERT_NE(p, nullptr) << want.preset;
  const TextConfig& t = p->text;
  EXPECT_EQ(t.hidden_size, want.hidden);
  EXPECT_EQ(t.num_layers, want.layers);
  EXPECT_EQ(t.num_heads, want.heads);
  EXPECT_EQ(t.num_kv_heads, want.kv_heads);
  EXPECT_EQ(t.intermediate_size, want.mlp);
  EXPECT_EQ(t.vocab_size, want.vocab);
  EXPECT_EQ(t.tie_word_embeddings, want.tied);
  // Shared by all four config.json files.
  EXPECT_EQ(t.rms_norm_eps, 1e-6);
  EXPECT_EQ(t.rope_theta, 1000000.0);
  EXPECT_EQ(t.mrope_section, (std::array<int, 3>{16, 24, 24}));
  EXPECT_EQ(t.max_position_embeddings, 128000);

  const VisionConfig& v = p->vision;
  EXPECT_EQ(v.intermediate_size, want.vision_mlp);
  EXPECT_EQ(v.out_hidden_size, want.hidden);
  EXPECT_EQ(v.depth, 32);
  EXPECT_EQ(v.hidden_size, 1280);
  EXPECT_EQ(v.num_heads, 16);
  EXPECT_EQ(v.in_channels, 3);
  EXPECT_EQ(v.patch_size, 14);
  EXPECT_EQ(v.temporal_patch_size, 2);
  EXPECT_EQ(v.spatial_merge_size, 2);
  EXPECT_EQ(v.window_size, 112);
  EXPECT_EQ(v.fullatt_block_indexes, (std::vector<int>{7, 15, 23, 31}));

  const SpecialTokens& k = p->tokens;
  EXPECT_EQ(k.endoftext, 151643);
  EXPECT_EQ(k.im_start, 151644);
  EXPECT_EQ(k.im_end, 151645);
  EXPECT_EQ(k.vision_start, 151652);
  EXPECT_EQ(k.vision_end, 151653);
  EXPECT_EQ(k.image_pad, 151655);
  EXPECT_EQ(k.video_pad, 151656);
}

INSTANTIATE_TEST_SUITE_P(Official, PublishedConfigTest, ::testing::ValuesIn(kPublished),
                         [](const ::testing::TestParamInfo<Published>& info) {
                           return std::string(info.param.preset);
                         });

}  // namespace
}  // namespace dhp
