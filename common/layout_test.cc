#include "common/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

namespace dhp::comm {
namespace {

using ::testing::ElementsAre;

Layout Make(int sv, int tt, int dp, Placement p = Placement::kCollocated) {
  Layout l;
  l.vision_degree = sv;
  l.text_degree = tt;
  l.dp = dp;
  l.placement = p;
  return l;
}

std::map<std::string, std::vector<int>> GroupMap(const Layout& l) {
  std::map<std::string, std::vector<int>> m;
  for (const GroupSpec& g : AllGroups(l)) m[g.name] = g.world_ranks;
  return m;
}

TEST(LayoutTest, ValidateNamesTheField) {
  EXPECT_TRUE(Make(1, 1, 1).Validate().ok());
  EXPECT_THAT(std::string(Make(0, 1, 1).Validate().message()),
              ::testing::HasSubstr("layout.vision_degree: 0"));
  EXPECT_THAT(std::string(Make(1, -1, 1).Validate().message()),
              ::testing::HasSubstr("layout.text_degree: -1"));
  EXPECT_THAT(std::string(Make(1, 1, 0).Validate().message()), ::testing::HasSubstr("layout.dp"));
}

TEST(LayoutTest, SingleRank) {
  Layout l = Make(1, 1, 1);
  EXPECT_EQ(l.WorldSize(), 1);
  EXPECT_TRUE(l.HandOffInMemory());
  EXPECT_EQ(VisionWorldRank(l, 0, 0), 0);
  EXPECT_EQ(TextWorldRank(l, 0, 0), 0);
  auto g = GroupMap(l);
  EXPECT_EQ(g.size(), 7u);
  for (const auto& [name, ranks] : g) EXPECT_THAT(ranks, ElementsAre(0)) << name;
}

TEST(LayoutTest, VisionTwoTextOne) {
  Layout l = Make(2, 1, 1);
  EXPECT_EQ(l.WorldSize(), 2);
  EXPECT_FALSE(l.HandOffInMemory());
  EXPECT_EQ(VisionWorldRank(l, 0, 1), 1);
  EXPECT_EQ(TextWorldRank(l, 0, 0), 0);
  EXPECT_EQ(VisionCoord(l, 1), (StageCoord{0, 1, 1}));
  EXPECT_FALSE(TextCoord(l, 1).has_value());  // rank 1 hosts vision only
  auto g = GroupMap(l);
  EXPECT_THAT(g["world"], ElementsAre(0, 1));
  EXPECT_THAT(g["vision"], ElementsAre(0, 1));
  EXPECT_THAT(g["text"], ElementsAre(0));
  EXPECT_THAT(g["vision.sp0"], ElementsAre(0, 1));
  EXPECT_THAT(g["text.tp0"], ElementsAre(0));
  EXPECT_THAT(g["vision.dp1"], ElementsAre(1));
  EXPECT_EQ(g.count("text.dp1"), 0u);
}

TEST(LayoutTest, VisionOneTextTwo) {
  Layout l = Make(1, 2, 1);
  EXPECT_EQ(l.WorldSize(), 2);
  EXPECT_FALSE(VisionCoord(l, 1).has_value());
  EXPECT_EQ(TextCoord(l, 1), (StageCoord{0, 1, 1}));
  auto g = GroupMap(l);
  EXPECT_THAT(g["vision"], ElementsAre(0));
  EXPECT_THAT(g["text.tp0"], ElementsAre(0, 1));
  EXPECT_THAT(g["text.dp0"], ElementsAre(0));
  EXPECT_THAT(g["text.dp1"], ElementsAre(1));
}

TEST(LayoutTest, TwoByTwoCollocatedHandsOffInMemory) {
  Layout l = Make(2, 2, 1);
  EXPECT_EQ(l.WorldSize(), 2);
  EXPECT_TRUE(l.HandOffInMemory());
  for (int i = 0; i < 2; ++i) EXPECT_EQ(VisionWorldRank(l, 0, i), TextWorldRank(l, 0, i));
  auto g = GroupMap(l);
  EXPECT_THAT(g["vision.sp0"], ElementsAre(0, 1));
  EXPECT_THAT(g["text.tp0"], ElementsAre(0, 1));
}

TEST(LayoutTest, VisionFourTextTwo) {
  Layout l = Make(4, 2, 1);
  EXPECT_EQ(l.WorldSize(), 4);
  auto g = GroupMap(l);
  EXPECT_THAT(g["vision.sp0"], ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(g["text.tp0"], ElementsAre(0, 1));
  EXPECT_FALSE(TextCoord(l, 2).has_value());
  EXPECT_FALSE(TextCoord(l, 3).has_value());
}

TEST(LayoutTest, VisionTwoTextFour) {
  Layout l = Make(2, 4, 1);
  EXPECT_EQ(l.WorldSize(), 4);
  auto g = GroupMap(l);
  EXPECT_THAT(g["vision.sp0"], ElementsAre(0, 1));
  EXPECT_THAT(g["text.tp0"], ElementsAre(0, 1, 2, 3));
  EXPECT_FALSE(VisionCoord(l, 3).has_value());
  EXPECT_EQ(TextCoord(l, 3), (StageCoord{0, 3, 3}));
}

TEST(LayoutTest, TwoByTwoByTwoCollocated) {
  Layout l = Make(2, 2, 2);
  EXPECT_EQ(l.WorldSize(), 4);
  EXPECT_EQ(VisionWorldRank(l, 1, 0), 2);
  EXPECT_EQ(TextWorldRank(l, 1, 1), 3);
  EXPECT_EQ(VisionCoord(l, 3), (StageCoord{1, 1, 3}));
  auto g = GroupMap(l);
  EXPECT_THAT(g["world"], ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(g["vision"], ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(g["text"], ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(g["vision.sp0"], ElementsAre(0, 1));
  EXPECT_THAT(g["vision.sp1"], ElementsAre(2, 3));
  EXPECT_THAT(g["text.tp1"], ElementsAre(2, 3));
  EXPECT_THAT(g["vision.dp0"], ElementsAre(0, 2));
  EXPECT_THAT(g["vision.dp1"], ElementsAre(1, 3));
  EXPECT_THAT(g["text.dp0"], ElementsAre(0, 2));
  EXPECT_THAT(g["text.dp1"], ElementsAre(1, 3));
}

TEST(LayoutTest, VisionFourTextTwoDpTwoLeavesGapsInTextBlocks) {
  Layout l = Make(4, 2, 2);
  EXPECT_EQ(l.WorldSize(), 8);
  auto g = GroupMap(l);
  EXPECT_THAT(g["text"], ElementsAre(0, 1, 4, 5));
  EXPECT_THAT(g["text.tp1"], ElementsAre(4, 5));
  EXPECT_THAT(g["vision.dp3"], ElementsAre(3, 7));
}

TEST(LayoutTest, SeparatePlacementPutsVisionFirst) {
  Layout l = Make(2, 2, 1, Placement::kSeparate);
  EXPECT_EQ(l.WorldSize(), 4);
  EXPECT_FALSE(l.HandOffInMemory());
  auto g = GroupMap(l);
  EXPECT_THAT(g["vision"], ElementsAre(0, 1));
  EXPECT_THAT(g["text"], ElementsAre(2, 3));
  EXPECT_THAT(g["text.tp0"], ElementsAre(2, 3));
  EXPECT_EQ(TextCoord(l, 2), (StageCoord{0, 0, 0}));
  EXPECT_FALSE(TextCoord(l, 1).has_value());
  EXPECT_FALSE(VisionCoord(l, 2).has_value());

  Layout one = Make(1, 1, 1, Placement::kSeparate);
  EXPECT_EQ(one.WorldSize(), 2);
  EXPECT_EQ(VisionWorldRank(one, 0, 0), 0);
  EXPECT_EQ(TextWorldRank(one, 0, 0), 1);
}

TEST(LayoutTest, SeparateWithDataParallel) {
  Layout l = Make(2, 2, 2, Placement::kSeparate);
  EXPECT_EQ(l.WorldSize(), 8);
  auto g = GroupMap(l);
  EXPECT_THAT(g["vision"], ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(g["text"], ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(g["vision.sp1"], ElementsAre(2, 3));
  EXPECT_THAT(g["text.tp1"], ElementsAre(6, 7));
  EXPECT_THAT(g["text.dp0"], ElementsAre(4, 6));
  EXPECT_THAT(g["vision.dp1"], ElementsAre(1, 3));
}

TEST(LayoutTest, VisionTensorParallelRenamesTheInnerGroup) {
  Layout l = Make(2, 2, 1);
  l.vision_parallelism = VisionParallelism::kTensor;
  auto g = GroupMap(l);
  EXPECT_THAT(g["vision.tp0"], ElementsAre(0, 1));
  EXPECT_EQ(g.count("vision.sp0"), 0u);
}

TEST(LayoutTest, GroupOrderIsFixed) {
  std::vector<std::string> names;
  for (const GroupSpec& g : AllGroups(Make(2, 2, 2))) names.push_back(g.name);
  EXPECT_THAT(names, ElementsAre("world", "vision", "text", "vision.sp0", "vision.sp1", "text.tp0",
                                 "text.tp1", "vision.dp0", "vision.dp1", "text.dp0", "text.dp1"));
}

// Properties over many layouts: the mappings are inverse bijections, every world rank hosts a
// role, collocation shares processes and separation never does, group ranks are consistent.
TEST(LayoutTest, MappingPropertiesHoldForManyLayouts) {
  for (Placement p : {Placement::kCollocated, Placement::kSeparate}) {
    for (int sv = 1; sv <= 4; ++sv) {
      for (int tt = 1; tt <= 4; ++tt) {
        for (int dp = 1; dp <= 3; ++dp) {
          Layout l = Make(sv, tt, dp, p);
          SCOPED_TRACE(l.DebugString());
          std::set<int> hosted;
          for (int d = 0; d < dp; ++d) {
            for (int i = 0; i < sv; ++i) {
              int w = VisionWorldRank(l, d, i);
              ASSERT_GE(w, 0);
              ASSERT_LT(w, l.WorldSize());
              EXPECT_EQ(VisionCoord(l, w), (StageCoord{d, i, d * sv + i}));
              hosted.insert(w);
              if (p == Placement::kCollocated && i < tt) {
                EXPECT_EQ(w, TextWorldRank(l, d, i));
              }
              if (p == Placement::kSeparate) {
                EXPECT_FALSE(TextCoord(l, w).has_value());
              }
            }
            for (int j = 0; j < tt; ++j) {
              int w = TextWorldRank(l, d, j);
              EXPECT_EQ(TextCoord(l, w), (StageCoord{d, j, d * tt + j}));
              hosted.insert(w);
            }
          }
          EXPECT_EQ(static_cast<int>(hosted.size()), l.WorldSize());
          for (const GroupSpec& g : AllGroups(l)) {
            std::set<int> unique(g.world_ranks.begin(), g.world_ranks.end());
            EXPECT_EQ(unique.size(), g.world_ranks.size()) << g.name;
            for (size_t k = 0; k < g.world_ranks.size(); ++k) {
              EXPECT_EQ(g.GroupRank(g.world_ranks[k]), static_cast<int>(k));
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dhp::comm
