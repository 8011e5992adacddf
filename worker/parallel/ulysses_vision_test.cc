// Ulysses vision parity: SP = 1, 2, 4 over real Gloo ranks (threads) against the single-rank
// tower on the same packed batch (uneven windows, frames spanning ranks, empty runs), for the
// output, every parameter gradient (summed over the SP group) and the exact byte counts.
#include "worker/parallel/ulysses_vision.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "worker/parallel/vision_comm_volume.h"
#include "worker/parallel/vision_parallel_test_util.h"
#include "worker/parallel/vision_sequence_split.h"

namespace dhp {
namespace {

using testing::MaxRelDiff;

constexpr double kTol = 1e-5;
constexpr char kGroup[] = "vision.sp0";

struct RankResult {
  at::Tensor out;
  std::map<std::string, at::Tensor> grads;                      // after the SP all-reduce
  std::map<comm::CommStats::Key, comm::CommCounters> counters;  // forward + backward only
  VisionSequenceSplit split;
};

const char* ModeName(UlyssesOutputGrad m) {
  return m == UlyssesOutputGrad::kReplicated ? "replicated" : "partial-sum";
}

// Runs the single-rank reference and the SP group on `grids`, and checks parity and bytes.
void CheckParity(int sp, const std::vector<GridThw>& grids, UlyssesOutputGrad mode) {
  SCOPED_TRACE(::testing::Message() << "sp = " << sp << ", output grad " << ModeName(mode));
  at::set_num_threads(1);
  const VisionConfig& c = testing::TinyVision();
  VisionTransformer ref = testing::MakeTinyVision(7);
  const testing::VisionBatch batch = testing::MakeVisionBatch(grids, 11);
  at::manual_seed(13);
  const at::Tensor upstream = at::randn({batch.plan.num_units, c.out_hidden_size});
  const at::Tensor ref_out = testing::ReferenceForwardBackward(ref, batch, upstream);
  const std::map<std::string, at::Tensor> ref_grads = testing::GradsByName(ref);

  std::vector<VisionTransformer> replicas;
  std::vector<at::Tensor> upstreams;  // what each rank's text side hands back
  for (int r = 0; r < sp; ++r) {
    replicas.push_back(testing::CloneVision(ref));
    if (mode == UlyssesOutputGrad::kReplicated) {
      upstreams.push_back(upstream);
    } else {  // partial gradients whose sum over ranks is `upstream`
      upstreams.push_back(upstream * (2.0 * (r + 1) / (sp * (sp + 1))));
    }
  }
  std::vector<RankResult> results(sp);
  absl::Status status = testing::RunRanks(
      sp, kGroup, [&](int r, comm::Communicator& comm, comm::CommStats& stats) -> absl::Status {
        absl::StatusOr<std::unique_ptr<UlyssesVisionTransformer>> uv =
            UlyssesVisionTransformer::Create(replicas[r], comm, {mode});
        if (!uv.ok()) return uv.status();
        absl::StatusOr<VisionSequenceSplit> split = (*uv)->Split(batch.plan);
        if (!split.ok()) return split.status();
        at::Tensor out = (*uv)->Forward(batch.pixels, batch.plan, *split);  // [N/4, out]
        out.backward(upstreams[r]);
        results[r].out = out.detach();
        results[r].counters = stats.Snapshot();
        results[r].split = *split;
        absl::Status s = (*uv)->AllReduceGradients();
        results[r].grads = testing::GradsByName(replicas[r]);
        return s;
      });
  ASSERT_TRUE(status.ok()) << status;

  int64_t group_sent = 0;
  double worst_out = 0, worst_grad = 0;
  for (int r = 0; r < sp; ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    const RankResult& res = results[r];
    worst_out = std::max(worst_out, MaxRelDiff(res.out, ref_out));
    EXPECT_LT(MaxRelDiff(res.out, ref_out), kTol);
    EXPECT_TRUE(at::equal(res.out, results[0].out)) << "ranks disagree on the output";
    ASSERT_EQ(res.grads.size(), ref_grads.size());
    for (const auto& [name, g] : ref_grads) {
      ASSERT_GT(g.abs().max().item<double>(), 0) << name << ": reference gradient is zero";
      worst_grad = std::max(worst_grad, MaxRelDiff(res.grads.at(name), g));
      EXPECT_LT(MaxRelDiff(res.grads.at(name), g), kTol) << name;
    }
    // Byte counts: exactly the analytic volume, nothing else on the group.
    const OpVolumes want = UlyssesStepVolume(c, res.split, r, /*dtype_bytes=*/4, mode);
    OpVolumes got;
    for (const auto& [key, counters] : res.counters) {
      EXPECT_EQ(key.first, kGroup);
      got[key.second] = counters;
    }
    EXPECT_EQ(got.size(), want.size());
    for (const auto& [op, counters] : want) {
      EXPECT_EQ(got[op], counters)
          << op << ": measured " << got[op].calls << " calls, " << got[op].tensor_bytes_sent
          << " B sent, " << got[op].tensor_bytes_received << " B received; analytic "
          << counters.calls << " calls, " << counters.tensor_bytes_sent << " B sent, "
          << counters.tensor_bytes_received << " B received";
    }
    group_sent += TotalOf(got).tensor_bytes_sent;
    std::printf(
        "[ulysses sp=%d %s] rank %d: %lld patches, all_to_all %lld B, all_gather %lld B, "
        "reduce_scatter %lld B sent\n",
        sp, ModeName(mode), r, static_cast<long long>(res.split.patches_per_rank[r]),
        static_cast<long long>(got[comm::kOpAllToAll].tensor_bytes_sent),
        static_cast<long long>(got[comm::kOpAllGather].tensor_bytes_sent),
        static_cast<long long>(got[comm::kOpReduceScatter].tensor_bytes_sent));
  }
  std::printf(
      "[ulysses sp=%d %s] group total: %lld B sent per step; max relative error vs "
      "single rank: output %.2e, gradients (%zu parameters) %.2e\n",
      sp, ModeName(mode), static_cast<long long>(group_sent), worst_out, ref_grads.size(),
      worst_grad);
}

class UlyssesVisionParityTest
    : public ::testing::TestWithParam<std::tuple<int, UlyssesOutputGrad>> {};

TEST_P(UlyssesVisionParityTest, MixedBatchMatchesSingleRank) {
  CheckParity(std::get<0>(GetParam()), testing::MixedGrids(), std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    Degrees, UlyssesVisionParityTest,
    ::testing::Combine(::testing::Values(1, 2, 4),
                       ::testing::Values(UlyssesOutputGrad::kReplicated,
                                         UlyssesOutputGrad::kPartialSum)),
    [](const ::testing::TestParamInfo<std::tuple<int, UlyssesOutputGrad>>& info) {
      return "sp" + std::to_string(std::get<0>(info.param)) +
             (std::get<1>(info.param) == UlyssesOutputGrad::kReplicated ? "_replicated"
                                                                        : "_partial_sum");
    });

TEST(UlyssesVisionTest, FewerWindowsThanRanksLeavesEmptyRanksCorrect) {
  // One 112x168 px image: 2 windows over 4 ranks -> ranks 0 and 2 own no patches.
  for (UlyssesOutputGrad mode : {UlyssesOutputGrad::kReplicated, UlyssesOutputGrad::kPartialSum}) {
    CheckParity(4, {GridThw{1, 8, 12}}, mode);
  }
}

TEST(UlyssesVisionTest, ForwardLocalComputesTheOwnedRows) {
  at::set_num_threads(1);
  VisionTransformer ref = testing::MakeTinyVision(3);
  const testing::VisionBatch batch = testing::MakeVisionBatch(testing::MixedGrids(), 5);
  at::Tensor full;  // [N/4, out] in input order
  {
    at::NoGradGuard no_grad;
    full = ref->ForwardWithPlan(batch.pixels, batch.plan);
  }
  std::vector<VisionTransformer> replicas = {testing::CloneVision(ref), testing::CloneVision(ref)};
  std::vector<at::Tensor> locals(2);
  std::vector<VisionSequenceSplit> splits(2);
  absl::Status status = testing::RunRanks(
      2, kGroup, [&](int r, comm::Communicator& comm, comm::CommStats&) -> absl::Status {
        auto uv = UlyssesVisionTransformer::Create(replicas[r], comm);
        if (!uv.ok()) return uv.status();
        auto split = (*uv)->Split(batch.plan);
        if (!split.ok()) return split.status();
        at::NoGradGuard no_grad;
        locals[r] = (*uv)->ForwardLocal(batch.pixels, batch.plan, *split);
        splits[r] = *split;
        return absl::OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status;
  for (int r = 0; r < 2; ++r) {
    const std::vector<int64_t> rows = OwnedMergedRows(batch.plan, splits[r], r);
    ASSERT_EQ(int64_t(rows.size()), splits[r].units_per_rank[r]);
    const at::Tensor want = full.index_select(0, at::tensor(rows, at::kLong));
    EXPECT_LT(MaxRelDiff(locals[r], want), kTol) << "rank " << r;
  }
}

TEST(UlyssesVisionTest, DegreeMustDivideHeads) {
  const VisionConfig& c = testing::TinyVision();  // 4 heads
  EXPECT_TRUE(ValidateVisionSp(c, 4).ok());
  absl::Status s = ValidateVisionSp(c, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "vision sequence-parallel degree 3 must divide the 4 vision attention heads "
            "(try 1, 2, 4)");
}

}  // namespace
}  // namespace dhp
