#include "worker/model/vision_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace dhp {
namespace {

VisionConfig Official() { return VisionConfig(); }  // patch 14, merge 2, window 112 px = 4 units

TEST(VisionWindowTest, OneWindowIsIdentity) {
  // 4x6 patches = 2x3 units: a single window, index is the identity.
  auto plan = MakeVisionWindowPlan({{1, 4, 6}}, Official());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->window_index, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(plan->cu_window_seqlens, (std::vector<int64_t>{0, 24}));
  EXPECT_EQ(plan->cu_seqlens, (std::vector<int64_t>{0, 24}));
  EXPECT_EQ(plan->num_patches, 24);
}

TEST(VisionWindowTest, FiveByFiveUnitsHandComputed) {
  // 10x10 patches = 5x5 units, padded to 8x8: windows of 4x4, 4x1, 1x4 and 1x1 units.
  auto plan = MakeVisionWindowPlan({{1, 10, 10}}, Official());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<int64_t> want = {0,  1,  2,  3,  5,  6,  7,  8,
                                     10, 11, 12, 13, 15, 16, 17, 18,  // window (0, 0)
                                     4,  9,  14, 19,                  // window (0, 1)
                                     20, 21, 22, 23,                  // window (1, 0)
                                     24};                             // window (1, 1)
  EXPECT_EQ(plan->window_index, want);
  EXPECT_EQ(plan->cu_window_seqlens, (std::vector<int64_t>{0, 64, 80, 96, 100}));
  // Rotary positions follow the window order: unit 4 (row 0, col 4 in units) comes 17th.
  EXPECT_EQ(plan->rope_pos[16 * 4 + 0], (std::array<int64_t, 2>{0, 8}));
  EXPECT_EQ(plan->rope_pos[16 * 4 + 3], (std::array<int64_t, 2>{1, 9}));
  EXPECT_EQ(plan->max_grid_side, 10);
}

TEST(VisionWindowTest, DivisibleGridDropsEmptyWindows) {
  // 8x8 patches = 4x4 units: Hugging Face pads to 8x8 units (a whole empty window row and
  // column); the empty windows are dropped, leaving one window.
  auto plan = MakeVisionWindowPlan({{1, 8, 8}}, Official());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->cu_window_seqlens, (std::vector<int64_t>{0, 64}));
  std::vector<int64_t> identity(16);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(plan->window_index, identity);
}

TEST(VisionWindowTest, RoundTripsOnOddAndDivisibleGrids) {
  // Several images in one pack, including sides divisible by 4 units and odd unit counts, and a
  // two-frame grid.
  const std::vector<GridThw> grids = {{1, 10, 14}, {1, 16, 16}, {2, 6, 22},
                                      {1, 2, 2},   {1, 34, 18}, {1, 32, 8}};
  auto plan = MakeVisionWindowPlan(grids, Official());
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t patches = 0;
  for (const GridThw& g : grids) patches += g.patches();
  ASSERT_EQ(plan->num_patches, patches);
  ASSERT_EQ(plan->num_units * 4, patches);
  ASSERT_EQ(plan->window_index.size(), size_t(plan->num_units));
  ASSERT_EQ(plan->rope_pos.size(), size_t(patches));
  // index then inverse = identity, both ways.
  for (int64_t u = 0; u < plan->num_units; ++u) {
    EXPECT_EQ(plan->window_index[plan->reverse_index[u]], u);
    EXPECT_EQ(plan->reverse_index[plan->window_index[u]], u);
  }
  // Window bounds: strictly increasing, end at N, include every image and frame boundary
  // (no window spans two images), and no window is larger than 4x4 units.
  const auto& cw = plan->cu_window_seqlens;
  EXPECT_EQ(cw.front(), 0);
  EXPECT_EQ(cw.back(), patches);
  for (size_t i = 1; i < cw.size(); ++i) {
    EXPECT_GT(cw[i], cw[i - 1]);
    EXPECT_LE(cw[i] - cw[i - 1], 64);
  }
  EXPECT_EQ(plan->cu_seqlens, (std::vector<int64_t>{0, 140, 396, 528, 660, 664, 1276, 1532}));
  for (int64_t b : plan->cu_seqlens) {
    EXPECT_TRUE(std::binary_search(cw.begin(), cw.end(), b)) << b;
  }
  // Each window holds units of one frame of one image, in the image's index range.
  for (size_t i = 1; i < cw.size(); ++i) {
    auto frame = std::upper_bound(plan->cu_seqlens.begin(), plan->cu_seqlens.end(), cw[i - 1]);
    for (int64_t p = cw[i - 1]; p < cw[i]; p += 4) {
      const int64_t unit_patch = plan->window_index[p / 4] * 4;
      EXPECT_GE(unit_patch, *(frame - 1));
      EXPECT_LT(unit_patch, *frame);
    }
  }
}

TEST(VisionWindowTest, RejectsGridsNotMultipleOfMerge) {
  auto plan = MakeVisionWindowPlan({{1, 4, 4}, {1, 5, 4}}, Official());
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("image 1"), std::string::npos) << plan.status();
}

}  // namespace
}  // namespace dhp
