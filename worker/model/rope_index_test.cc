#include "worker/model/rope_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/model_presets.h"

namespace dhp {
namespace {

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

TEST(RopeIndexTest, TextOnlyIsARunningIndexPerSample) {
  auto pos = ComputeMropePositions({5, 6, 7, 8, 9}, {0, 3, 5}, {}, Tiny().vision, Tiny().tokens);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(*pos, (std::vector<int64_t>{0, 1, 2, 0, 1,  //
                                        0, 1, 2, 0, 1,  //
                                        0, 1, 2, 0, 1}));
}

TEST(RopeIndexTest, MixedImageTextHandComputed) {
  const SpecialTokens& tk = Tiny().tokens;  // vision_start 1003, vision_end 1004, image_pad 1005
  const int64_t P = tk.image_pad, VS = tk.vision_start, VE = tk.vision_end;
  // Sample 0: text, an image of 4x6 patches (2x3 merged tokens), text.
  // Sample 1: text, an image of 4x4 patches (2x2 merged tokens), vision_end.
  const std::vector<int64_t> ids = {5, VS, P,  P, P, P, P, P, VE, 7, 8,  //
                                    9, 10, VS, P, P, P, P, VE};
  auto pos = ComputeMropePositions(ids, {0, 11, 19}, {{1, 4, 6}, {1, 4, 4}}, Tiny().vision, tk);
  ASSERT_TRUE(pos.ok()) << pos.status();
  const std::vector<int64_t> t = {0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7,  //
                                  0, 1, 2, 3, 3, 3, 3, 5};
  const std::vector<int64_t> h = {0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7,  //
                                  0, 1, 2, 3, 3, 4, 4, 5};
  const std::vector<int64_t> w = {0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7,  //
                                  0, 1, 2, 3, 4, 3, 4, 5};
  std::vector<int64_t> want = t;
  want.insert(want.end(), h.begin(), h.end());
  want.insert(want.end(), w.begin(), w.end());
  EXPECT_EQ(*pos, want);
}

// Hugging Face transformers' get_rope_index on the official special tokens, as printed by
// tools/hf_rope_index.py (transformers 5.23.0): each sequence is <|im_start|> 9 10, then per
// image <|vision_start|>, t*h*w/4 <|image_pad|>, <|vision_end|> 11 12, then 13 <|im_end|> 14.
struct HfCase {
  const char* name;
  std::vector<GridThw> grids;
  std::vector<int64_t> positions;  // axis-major: t..., h..., w...
};

std::vector<int64_t> HfSequence(const std::vector<GridThw>& grids, const SpecialTokens& tk) {
  std::vector<int64_t> ids = {tk.im_start, 9, 10};
  for (const GridThw& g : grids) {
    ids.push_back(tk.vision_start);
    ids.insert(ids.end(), g.t * g.h * g.w / 4, tk.image_pad);
    ids.insert(ids.end(), {tk.vision_end, 11, 12});
  }
  ids.insert(ids.end(), {13, tk.im_end, 14});
  return ids;
}

TEST(RopeIndexTest, EqualsTransformersGetRopeIndex) {
  const ModelPreset& p = *FindModelPreset("qwen2_5_vl_7b");
  const HfCase cases[] = {
    {"text_only",
     {},
     {
         0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}},
    {"one_image",
     {{1, 6, 10}},
     {
         0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 9, 10, 11, 12, 13, 14,
         0, 1, 2, 3, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 9, 10, 11, 12, 13, 14,
         0, 1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}},
    {"three_images",
     {{1, 4, 6},
     {
         1, 10, 4}, {1, 2, 2}}, {0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 7, 8, 9, 10, 11, 11, 11,
         11, 11, 11, 11, 11, 11, 11, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 0, 1, 2,
         3, 4, 4, 4, 5, 5, 5, 7, 8, 9, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 16, 17,
         18, 19, 20, 21, 22, 23, 24, 25, 26, 0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8, 9, 10,
         11, 12, 11, 12, 11, 12, 11, 12, 11, 12, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
         26}},
  };
  for (const HfCase& c : cases) {
    const std::vector<int64_t> ids = HfSequence(c.grids, p.tokens);
    ASSERT_EQ(3 * ids.size(), c.positions.size()) << c.name;
    auto pos = ComputeMropePositions(ids, {}, c.grids, p.vision, p.tokens);
    ASSERT_TRUE(pos.ok()) << c.name << ": " << pos.status();
    EXPECT_EQ(*pos, c.positions) << c.name;
  }
}

TEST(RopeIndexTest, ErrorsOnMismatchedRunsAndGrids) {
  const SpecialTokens& tk = Tiny().tokens;
  const int64_t P = tk.image_pad;
  const VisionConfig& v = Tiny().vision;
  // Run of 3 but the grid needs 4.
  EXPECT_FALSE(ComputeMropePositions({1, P, P, P, 2}, {}, {{1, 4, 4}}, v, tk).ok());
  // Grid left over.
  EXPECT_FALSE(ComputeMropePositions({1, 2}, {}, {{1, 4, 4}}, v, tk).ok());
  // No grid for the run.
  EXPECT_FALSE(ComputeMropePositions({1, P, P, P, P}, {}, {}, v, tk).ok());
  // Run crosses a sample boundary.
  EXPECT_FALSE(ComputeMropePositions({1, P, P, P, P}, {0, 3, 5}, {{1, 4, 4}}, v, tk).ok());
  // Video is not supported.
  EXPECT_FALSE(ComputeMropePositions({1, tk.video_pad}, {}, {}, v, tk).ok());
  // Bad bounds.
  EXPECT_FALSE(ComputeMropePositions({1, 2}, {0, 3}, {}, v, tk).ok());
}

}  // namespace
}  // namespace dhp
