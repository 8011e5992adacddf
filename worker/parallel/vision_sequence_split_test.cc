#include "worker/parallel/vision_sequence_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "worker/parallel/vision_comm_volume.h"

namespace dhp {
namespace {

VisionConfig Official() { return VisionConfig(); }  // patch 14, merge 2, window 4x4 units

VisionWindowPlan Plan(const std::vector<GridThw>& grids) {
  absl::StatusOr<VisionWindowPlan> plan = MakeVisionWindowPlan(grids, Official());
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// 224x224, 112x168, 168x112 px images and a 2-frame 112x112 video (the parallel tests' batch).
std::vector<GridThw> Mixed() { return {{1, 16, 16}, {1, 8, 12}, {1, 12, 8}, {2, 8, 8}}; }

// Every property the header promises, for one plan and degree.
void CheckSplit(const VisionWindowPlan& plan, int sp) {
  SCOPED_TRACE(testing::Message() << "sp = " << sp);
  absl::StatusOr<VisionSequenceSplit> split = SplitVisionSequence(plan, sp, 4);
  ASSERT_TRUE(split.ok()) << split.status();
  const std::vector<int64_t>& wb = plan.cu_window_seqlens;
  const int64_t n = plan.num_patches;
  ASSERT_EQ(split->cuts.size(), size_t(sp + 1));
  EXPECT_EQ(split->cuts.front(), 0);
  EXPECT_EQ(split->cuts.back(), n);
  int64_t longest = 0;
  for (size_t i = 1; i < wb.size(); ++i) longest = std::max(longest, wb[i] - wb[i - 1]);
  for (int k = 1; k < sp; ++k) {
    const int64_t c = split->cuts[k];
    // A window boundary (no window is cut), a multiple of the merge unit, non-decreasing.
    EXPECT_TRUE(std::binary_search(wb.begin(), wb.end(), c)) << "cut " << k << " = " << c;
    EXPECT_EQ(c % 4, 0);
    EXPECT_GE(c, split->cuts[k - 1]);
    // Nearest to N*k/sp, ties to the lower boundary (brute force, exact integers).
    const int64_t d = std::llabs(c * sp - n * k);
    for (int64_t b : wb) {
      const int64_t db = std::llabs(b * sp - n * k);
      EXPECT_TRUE(db > d || (db == d && b >= c)) << "boundary " << b << " beats cut " << c;
    }
    // Within half a (longest) window of the ideal cut.
    EXPECT_LE(2 * std::llabs(c * sp - n * k), longest * sp);
  }
  int64_t total_units = 0;
  for (int r = 0; r < sp; ++r) {
    const VisionRankRun& run = split->run(r);
    EXPECT_EQ(run.patch_begin, split->cuts[r]);
    EXPECT_EQ(run.patch_end, split->cuts[r + 1]);
    EXPECT_EQ(split->patches_per_rank[r], run.patches());
    EXPECT_EQ(split->units_per_rank[r] * 4, run.patches());
    EXPECT_EQ(split->UnitOffset(r), total_units);
    total_units += split->units_per_rank[r];
    // Balanced within one window of the ideal N/sp.
    EXPECT_LE(std::llabs(run.patches() * sp - n), longest * sp);
    // Local windows are exactly the plan's windows [window_begin, window_end), shifted.
    ASSERT_EQ(run.cu_window_seqlens.size(), size_t(run.windows() + 1));
    for (int64_t w = 0; w <= run.windows(); ++w) {
      EXPECT_EQ(run.cu_window_seqlens[w] + run.patch_begin, wb[run.window_begin + w]);
    }
    // Frame pieces tile the run and each lies inside its frame.
    ASSERT_EQ(run.cu_frame_pieces.size(), run.frame_of_piece.size() + 1);
    EXPECT_EQ(run.cu_frame_pieces.back(), run.patches());
    for (size_t i = 0; i < run.frame_of_piece.size(); ++i) {
      const int64_t f = run.frame_of_piece[i];
      EXPECT_GE(run.cu_frame_pieces[i] + run.patch_begin, plan.cu_seqlens[f]);
      EXPECT_LE(run.cu_frame_pieces[i + 1] + run.patch_begin, plan.cu_seqlens[f + 1]);
      EXPECT_GE(r, split->frame_first_rank[f]);
      EXPECT_LE(r, split->frame_last_rank[f]);
    }
  }
  EXPECT_EQ(total_units * 4, n);
  EXPECT_EQ(split->cu_seqlens, plan.cu_seqlens);
  // The owned merged rows, rank after rank, are the window order of the units.
  std::vector<int64_t> owned;
  for (int r = 0; r < sp; ++r) {
    const std::vector<int64_t> rows = OwnedMergedRows(plan, *split, r);
    EXPECT_EQ(int64_t(rows.size()), split->units_per_rank[r]);
    owned.insert(owned.end(), rows.begin(), rows.end());
  }
  EXPECT_EQ(owned, plan.window_index);
}

TEST(VisionSequenceSplitTest, PropertiesOnMixedBatches) {
  for (const auto& grids : std::vector<std::vector<GridThw>>{
           Mixed(),
           {{1, 10, 14}, {1, 16, 16}, {2, 6, 22}, {1, 2, 2}, {1, 34, 18}, {1, 32, 8}},
           {{1, 8, 12}},
           {{1, 2, 2}}}) {
    const VisionWindowPlan plan = Plan(grids);
    for (int sp = 1; sp <= 8; ++sp) CheckSplit(plan, sp);
  }
}

TEST(VisionSequenceSplitTest, MixedBatchHandComputed) {
  // Windows (patches): 64 x4 | 64 32 | 64 32 | 64 | 64; frames 256 | 96 | 96 | 64 | 64.
  const VisionWindowPlan plan = Plan(Mixed());
  ASSERT_EQ(plan.cu_window_seqlens,
            (std::vector<int64_t>{0, 64, 128, 192, 256, 320, 352, 416, 448, 512, 576}));
  absl::StatusOr<VisionSequenceSplit> s2 = SplitVisionSequence(plan, 2, 4);
  ASSERT_TRUE(s2.ok());
  // Ideal 288: boundaries 256 and 320 are both 32 away; the tie goes to the lower.
  EXPECT_EQ(s2->cuts, (std::vector<int64_t>{0, 256, 576}));
  absl::StatusOr<VisionSequenceSplit> s4 = SplitVisionSequence(plan, 4, 4);
  ASSERT_TRUE(s4.ok());
  // Ideals 144, 288, 432 -> 128 (16 away), 256 (tie with 320), 416 (tie with 448).
  EXPECT_EQ(s4->cuts, (std::vector<int64_t>{0, 128, 256, 416, 576}));
  EXPECT_EQ(s4->patches_per_rank, (std::vector<int64_t>{128, 128, 160, 160}));
  EXPECT_EQ(s4->units_per_rank, (std::vector<int64_t>{32, 32, 40, 40}));
  // The 224x224 image's frame spans ranks 0-1; the 168x112 one spans ranks 2-3.
  EXPECT_EQ(s4->frame_first_rank, (std::vector<int>{0, 2, 2, 3, 3}));
  EXPECT_EQ(s4->frame_last_rank, (std::vector<int>{1, 2, 3, 3, 3}));
  EXPECT_EQ(s4->run(2).cu_frame_pieces, (std::vector<int64_t>{0, 96, 160}));
  EXPECT_EQ(s4->run(2).frame_of_piece, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s4->run(2).cu_window_seqlens, (std::vector<int64_t>{0, 64, 96, 160}));
}

TEST(VisionSequenceSplitTest, FewerWindowsThanRanksLeavesEmptyRuns) {
  // 112x168 px: windows of 64 and 32 patches. Ideals 24, 48, 72 -> 0, 64, 64.
  const VisionWindowPlan plan = Plan({{1, 8, 12}});
  absl::StatusOr<VisionSequenceSplit> s = SplitVisionSequence(plan, 4, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->cuts, (std::vector<int64_t>{0, 0, 64, 64, 96}));
  EXPECT_TRUE(s->run(0).empty());
  EXPECT_TRUE(s->run(2).empty());
  EXPECT_EQ(s->run(0).cu_window_seqlens, (std::vector<int64_t>{0}));
  EXPECT_EQ(s->run(0).cu_frame_pieces, (std::vector<int64_t>{0}));
  EXPECT_EQ(s->run(3).cu_window_seqlens, (std::vector<int64_t>{0, 32}));
  EXPECT_EQ(s->max_units(), 16);
}

TEST(VisionSequenceSplitTest, OneRankTakesEverything) {
  const VisionWindowPlan plan = Plan(Mixed());
  absl::StatusOr<VisionSequenceSplit> s = SplitVisionSequence(plan, 1, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->cuts, (std::vector<int64_t>{0, 576}));
  EXPECT_EQ(s->run(0).cu_window_seqlens, plan.cu_window_seqlens);
  EXPECT_EQ(s->run(0).cu_frame_pieces, plan.cu_seqlens);
}

TEST(VisionSequenceSplitTest, RejectsBadArguments) {
  const VisionWindowPlan plan = Plan(Mixed());
  EXPECT_EQ(SplitVisionSequence(plan, 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitVisionSequence(plan, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  VisionWindowPlan broken = plan;
  broken.cu_window_seqlens.back() += 4;
  absl::Status s = SplitVisionSequence(broken, 2, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cu_window_seqlens"), std::string::npos) << s;
}

TEST(VisionSequenceSplitDeathTest, WindowBoundaryInsideMergedUnitCrashes) {
  VisionWindowPlan plan = Plan(Mixed());
  plan.cu_window_seqlens[1] = 62;  // not a multiple of 4: a broken plan invariant
  EXPECT_DEATH(SplitVisionSequence(plan, 2, 4).IgnoreError(), "cuts a merged unit");
}

TEST(VisionCommVolumeTest, EvenSplitMatchesDeepSpeedUlysses) {
  // 4 windows of 64 patches: sp = 2 and 4 split evenly.
  VisionConfig c;  // 7B-sized vision tower: h = 1280, 16 heads, 4 full-attention blocks
  const VisionWindowPlan plan = Plan({{1, 32, 8}});  // 256 patches, 4 windows
  for (int p : {2, 4}) {
    absl::StatusOr<VisionSequenceSplit> s = SplitVisionSequence(plan, p, 4);
    ASSERT_TRUE(s.ok());
    const int64_t n = 256, h = c.hidden_size, b = 2;
    OpVolumes v = UlyssesStepVolume(c, *s, 0, b, UlyssesOutputGrad::kReplicated);
    // Per full-attention block and rank: 8*N*h*b*(P-1)/P^2 each way (forward + backward).
    EXPECT_EQ(v[comm::kOpAllToAll].tensor_bytes_sent, 4 * 8 * n * h * b * (p - 1) / (p * p));
    EXPECT_EQ(v[comm::kOpAllToAll].calls, 16);
    EXPECT_EQ(v[comm::kOpAllGather].tensor_bytes_sent,
              (n / 4 / p) * c.out_hidden_size * b * (p - 1));
    EXPECT_EQ(v.count(comm::kOpReduceScatter), 0u);
    OpVolumes partial = UlyssesStepVolume(c, *s, 0, b, UlyssesOutputGrad::kPartialSum);
    EXPECT_EQ(partial[comm::kOpReduceScatter].tensor_bytes_sent,
              (n / 4) * (p - 1) / p * c.out_hidden_size * b);
    // TP: (4L + 2) all-reduces, each 2*bytes*(P-1)/P.
    OpVolumes tp = VisionTpStepVolume(c, n, p, b);
    EXPECT_EQ(tp[comm::kOpAllReduce].calls, 4 * c.depth + 2);
    EXPECT_EQ(tp[comm::kOpAllReduce].tensor_bytes_sent,
              (4 * c.depth + 1) * (2 * n * h * b * (p - 1) / p) +
                  2 * (n / 4) * c.out_hidden_size * b * (p - 1) / p);
    EXPECT_LT(TotalOf(v).tensor_bytes_sent, TotalOf(tp).tensor_bytes_sent);
  }
  EXPECT_TRUE(
      UlyssesStepVolume(c, *SplitVisionSequence(plan, 1, 4), 0, 4, UlyssesOutputGrad::kPartialSum)
          .empty());
}

}  // namespace
}  // namespace dhp
