#include "worker/model/rope_index.h"

#include <gtest/gtest.h>

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
