#include "worker/model/param_count.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "common/model_presets.h"
#include "worker/model/model_config.h"

namespace dhp {
namespace {

class OfficialPresetTest : public ::testing::TestWithParam<const char*> {};

TEST_P(OfficialPresetTest, MatchesPublishedSize) {
  const ModelPreset* p = FindModelPreset(GetParam());
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(ValidateModelConfig(p->vision, p->text).ok());
  const ParamCount c = CountParams(p->vision, p->text);
  const double billions = c.total / 1e9;
  EXPECT_NEAR(billions, p->published_params_billions, p->published_params_billions * 0.005)
      << GetParam() << ": " << c.total;
  // The vision tower is the same ~670M for every size but for the merger's output width
  // (+30M at 72B).
  EXPECT_GT(c.vision_total / 1e6, 660) << GetParam();
  EXPECT_LT(c.vision_total / 1e6, 705) << GetParam();
}

// What Hugging Face transformers counts for the same configs on the meta device
// (tools/hf_param_counts.py; transformers 5.23.0, torch 2.11.0): total, vision, text.
struct TransformersCount {
  const char* preset;
  int64_t total, vision, text;
};
const TransformersCount kTransformersCounts[] = {
    {"qwen2_5_vl_3b", 3754622976, 668684288, 3085938688},
    {"qwen2_5_vl_7b", 8292166656, 676550144, 7615616512},
    {"qwen2_5_vl_32b", 33452718336, 688841984, 32763876352},
    {"qwen2_5_vl_72b", 73410777344, 704573696, 72706203648},
};

TEST(ParamCountTest, EqualsTransformersCountsExactly) {
  for (const TransformersCount& want : kTransformersCounts) {
    const ModelPreset* p = FindModelPreset(want.preset);
    ASSERT_NE(p, nullptr) << want.preset;
    const ParamCount c = CountParams(p->vision, p->text);
    EXPECT_EQ(c.total, want.total) << want.preset;
    EXPECT_EQ(c.vision_total, want.vision) << want.preset;
    EXPECT_EQ(c.text_total, want.text) << want.preset;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, OfficialPresetTest,
                         ::testing::Values("qwen2_5_vl_3b", "qwen2_5_vl_7b", "qwen2_5_vl_32b",
                                           "qwen2_5_vl_72b"));

TEST(ParamCountTest, SevenBillionBreakdown) {
  const ModelPreset* p = FindModelPreset("qwen2_5_vl_7b");
  ASSERT_NE(p, nullptr);
  const ParamCount c = CountParams(p->vision, p->text);
  EXPECT_EQ(c.vision_patch_embed, 1280 * 3 * 2 * 14 * 14);
  // qkv 3840x1280+3840, proj 1280x1280+1280, gate/up 2x(3420x1280+3420), down 1280x3420+1280,
  // two norms.
  EXPECT_EQ(c.vision_block, 19702200);
  EXPECT_EQ(c.vision_merger, 1280 + 5120 * 5120 + 5120 + 3584 * 5120 + 3584);
  EXPECT_EQ(c.text_embed, int64_t{152064} * 3584);
  EXPECT_EQ(c.lm_head, c.text_embed);
  EXPECT_EQ(c.total, c.vision_total + c.text_total);
}

TEST(ParamCountTest, TiedEmbeddingsHaveNoLmHead) {
  const ModelPreset* p = FindModelPreset("qwen2_5_vl_3b");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(CountParams(p->vision, p->text).lm_head, 0);
}

TEST(ModelConfigTest, AllPresetsValidate) {
  for (const std::string& name : ModelPresetNames()) {
    const ModelPreset* p = FindModelPreset(name);
    EXPECT_TRUE(ValidateModelConfig(p->vision, p->text).ok()) << name;
  }
}

TEST(ModelConfigTest, RejectsBadConfigsNamingTheField) {
  const ModelPreset* p = FindModelPreset("tiny");
  ASSERT_NE(p, nullptr);
  TextConfig t = p->text;
  t.mrope_section = {2, 3, 4};
  absl::Status s = ValidateModelConfig(p->vision, t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("mrope_section"), std::string::npos) << s;

  t = p->text;
  t.num_kv_heads = 3;
  s = ValidateModelConfig(p->vision, t);
  EXPECT_NE(s.message().find("num_kv_heads"), std::string::npos) << s;

  VisionConfig v = p->vision;
  v.fullatt_block_indexes = {1, 4};
  s = ValidateModelConfig(v, p->text);
  EXPECT_NE(s.message().find("fullatt_block_indexes"), std::string::npos) << s;

  v = p->vision;
  v.out_hidden_size = 32;
  s = ValidateModelConfig(v, p->text);
  EXPECT_NE(s.message().find("out_hidden_size"), std::string::npos) << s;
}

}  // namespace
}  // namespace dhp
