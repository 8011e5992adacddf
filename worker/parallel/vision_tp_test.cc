// Vision tensor parallelism parity (TP = 2, 4 over real Gloo ranks as threads) against the
// single-rank tower: output, every re-assembled parameter gradient, exact all-reduce bytes; and
// the headline comparison: Ulysses SP moves fewer bytes than TP for the same batch.
#include "worker/parallel/vision_tp.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "worker/model/tensor_source.h"
#include "worker/parallel/ulysses_vision.h"
#include "worker/parallel/vision_comm_volume.h"
#include "worker/parallel/vision_parallel_test_util.h"

namespace dhp {
namespace {

using testing::MaxRelDiff;

constexpr double kTol = 1e-5;

TEST(VisionTpTest, ShardLayoutAndRoundTrip) {
  VisionTransformer full = testing::MakeTinyVision(7);
  const VisionConfig& c = testing::TinyVision();  // h 64, 4 heads of 16, MLP 128
  EXPECT_EQ(VisionTpShardOf("blocks.0.attn.qkv.weight"), VisionTpShardKind::kQkvRows);
  EXPECT_EQ(VisionTpShardOf("blocks.0.attn.proj.weight"), VisionTpShardKind::kCols);
  EXPECT_EQ(VisionTpShardOf("blocks.0.attn.proj.bias"), VisionTpShardKind::kReplicated);
  EXPECT_EQ(VisionTpShardOf("blocks.2.mlp.up_proj.bias"), VisionTpShardKind::kRows);
  EXPECT_EQ(VisionTpShardOf("blocks.2.mlp.down_proj.weight"), VisionTpShardKind::kCols);
  EXPECT_EQ(VisionTpShardOf("merger.mlp.0.bias"), VisionTpShardKind::kRows);
  EXPECT_EQ(VisionTpShardOf("merger.mlp.2.weight"), VisionTpShardKind::kCols);
  EXPECT_EQ(VisionTpShardOf("merger.ln_q.weight"), VisionTpShardKind::kReplicated);
  EXPECT_EQ(VisionTpShardOf("patch_embed.proj.weight"), VisionTpShardKind::kReplicated);

  // qkv: rank 1 of 2 holds heads 2-3 of q, of k and of v (rows 32..63 of each 64-row third).
  const at::Tensor qkv = full->block(0)->attn->qkv->weight.detach();  // [192, 64]
  const at::Tensor shard = ShardVisionTensor("blocks.0.attn.qkv.weight", qkv, 1, 2);
  ASSERT_EQ(shard.sizes(), (std::vector<int64_t>{96, 64}));
  EXPECT_TRUE(at::equal(shard.narrow(0, 0, 32), qkv.narrow(0, 32, 32)));    // q heads 2-3
  EXPECT_TRUE(at::equal(shard.narrow(0, 32, 32), qkv.narrow(0, 96, 32)));   // k heads 2-3
  EXPECT_TRUE(at::equal(shard.narrow(0, 64, 32), qkv.narrow(0, 160, 32)));  // v heads 2-3
  for (int p : {2, 4}) {
    for (const auto& item : full->named_parameters(/*recurse=*/true)) {
      std::vector<at::Tensor> shards;
      for (int r = 0; r < p; ++r)
        shards.push_back(ShardVisionTensor(item.key(), item.value(), r, p));
      EXPECT_TRUE(at::equal(UnshardVisionTensor(item.key(), shards), item.value())) << item.key();
    }
  }
  EXPECT_TRUE(ValidateVisionTp(c, 4).ok());
  absl::Status s = ValidateVisionTp(c, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "vision tensor-parallel degree 3 must divide num_heads 4");
}

struct TpRankResult {
  at::Tensor out;
  std::map<std::string, at::Tensor> grads;                      // re-assembled
  std::map<comm::CommStats::Key, comm::CommCounters> counters;  // forward + backward only
};

class VisionTpParityTest : public ::testing::TestWithParam<int> {};

TEST_P(VisionTpParityTest, MixedBatchMatchesSingleRank) {
  const int tp = GetParam();
  at::set_num_threads(1);
  const VisionConfig& c = testing::TinyVision();
  VisionTransformer ref = testing::MakeTinyVision(7);
  const testing::VisionBatch batch = testing::MakeVisionBatch(testing::MixedGrids(), 11);
  at::manual_seed(13);
  const at::Tensor upstream = at::randn({batch.plan.num_units, c.out_hidden_size});
  const at::Tensor ref_out = testing::ReferenceForwardBackward(ref, batch, upstream);
  const std::map<std::string, at::Tensor> ref_grads = testing::GradsByName(ref);
  VisionTransformer source = testing::CloneVision(ref);  // parameters without gradients

  std::vector<TpRankResult> results(tp);
  absl::Status status = testing::RunRanks(
      tp, "vision.tp0", [&](int r, comm::Communicator& comm, comm::CommStats& stats) {
        absl::StatusOr<std::unique_ptr<VisionTpTransformer>> model =
            VisionTpTransformer::Create(source, comm);
        if (!model.ok()) return model.status();
        at::Tensor out = (*model)->Forward(batch.pixels, batch.plan);
        out.backward(upstream);
        results[r].out = out.detach();
        results[r].counters = stats.Snapshot();
        absl::StatusOr<std::map<std::string, at::Tensor>> grads = (*model)->GatherFullGradients();
        if (!grads.ok()) return grads.status();
        results[r].grads = *std::move(grads);
        return absl::OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status;

  const OpVolumes want = VisionTpStepVolume(c, batch.plan.num_patches, tp, /*dtype_bytes=*/4);
  int64_t group_sent = 0;
  double worst_out = 0, worst_grad = 0;
  for (int r = 0; r < tp; ++r) {
    SCOPED_TRACE(::testing::Message() << "tp = " << tp << ", rank " << r);
    const TpRankResult& res = results[r];
    worst_out = std::max(worst_out, MaxRelDiff(res.out, ref_out));
    EXPECT_LT(MaxRelDiff(res.out, ref_out), kTol);
    ASSERT_EQ(res.grads.size(), ref_grads.size());
    for (const auto& [name, g] : ref_grads) {
      worst_grad = std::max(worst_grad, MaxRelDiff(res.grads.at(name), g));
      EXPECT_LT(MaxRelDiff(res.grads.at(name), g), kTol) << name;
    }
    OpVolumes got;
    for (const auto& [key, counters] : res.counters) got[key.second] = counters;
    EXPECT_EQ(got.size(), want.size());
    const comm::CommCounters& ar = got[comm::kOpAllReduce];
    EXPECT_EQ(ar, want.at(comm::kOpAllReduce))
        << "measured " << ar.calls << " all-reduces, " << ar.tensor_bytes_sent
        << " B sent; analytic " << want.at(comm::kOpAllReduce).calls << ", "
        << want.at(comm::kOpAllReduce).tensor_bytes_sent;
    group_sent += ar.tensor_bytes_sent;
    std::printf("[vision tp=%d] rank %d: %lld all-reduces, %lld B sent\n", tp, r,
                static_cast<long long>(ar.calls), static_cast<long long>(ar.tensor_bytes_sent));
  }
  std::printf(
      "[vision tp=%d] group total: %lld B sent per step; max relative error vs single "
      "rank: output %.2e, re-assembled gradients (%zu parameters) %.2e\n",
      tp, static_cast<long long>(group_sent), worst_out, ref_grads.size(), worst_grad);
}

INSTANTIATE_TEST_SUITE_P(Degrees, VisionTpParityTest, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "tp" + std::to_string(info.param);
                         });

// Shard-first in the training dtype: a rank built from a bf16 source holds bf16 shards (no fp32
// tower, no fp32 copy of them) and its output tracks the fp32 single-rank tower.
TEST(VisionTpTest, ShardsComeInTheSourcesDtype) {
  at::set_num_threads(1);
  const VisionConfig& c = testing::TinyVision();
  VisionTransformer ref = testing::MakeTinyVision(7);
  const testing::VisionBatch batch = testing::MakeVisionBatch(testing::MixedGrids(), 11);
  at::Tensor ref_out;
  {
    at::NoGradGuard no_grad;
    ref_out = ref->ForwardWithPlan(batch.pixels, batch.plan);
  }
  const NamedTensorSource fp32 = ModuleTensorSource(*ref);
  const CastTensorSource bf16(fp32, at::kBFloat16);
  std::vector<at::Tensor> outs(2);
  absl::Status status = testing::RunRanks(
      2, "vision.tp0", [&](int r, comm::Communicator& comm, comm::CommStats&) -> absl::Status {
        auto m = VisionTpTransformer::Create(c, bf16, "", comm);
        if (!m.ok()) return m.status();
        for (const auto& item : (*m)->model()->named_parameters()) {
          EXPECT_EQ(item.value().scalar_type(), at::kBFloat16) << item.key();
          EXPECT_TRUE(item.value().requires_grad()) << item.key();
        }
        const at::Tensor qkv = (*m)->model()->block(0)->attn->qkv->weight;
        EXPECT_EQ(qkv.sizes(), (std::vector<int64_t>{3 * c.hidden_size / 2, c.hidden_size}));
        outs[r] = (*m)->Forward(batch.pixels, batch.plan).detach().to(at::kFloat);
        return absl::OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status;
  for (const at::Tensor& out : outs) EXPECT_LT(MaxRelDiff(out, ref_out), 5e-2);
  EXPECT_TRUE(at::equal(outs[0], outs[1]));
}

// Measured (not analytic) bytes of one forward + backward, summed over the group's ranks.
int64_t MeasuredGroupBytes(int degree, bool ulysses, const testing::VisionBatch& batch,
                           const VisionTransformer& source, const at::Tensor& upstream) {
  std::vector<int64_t> sent(degree, 0);
  std::vector<VisionTransformer> replicas;
  for (int r = 0; r < degree; ++r) replicas.push_back(testing::CloneVision(source));
  absl::Status status = testing::RunRanks(
      degree, ulysses ? "vision.sp0" : "vision.tp0",
      [&](int r, comm::Communicator& comm, comm::CommStats& stats) -> absl::Status {
        at::Tensor out;
        std::unique_ptr<UlyssesVisionTransformer> sp;
        std::unique_ptr<VisionTpTransformer> tp;
        if (ulysses) {
          auto m = UlyssesVisionTransformer::Create(replicas[r], comm);
          if (!m.ok()) return m.status();
          sp = *std::move(m);
          auto split = sp->Split(batch.plan);
          if (!split.ok()) return split.status();
          out = sp->Forward(batch.pixels, batch.plan, *split);
        } else {
          auto m = VisionTpTransformer::Create(replicas[r], comm);
          if (!m.ok()) return m.status();
          tp = *std::move(m);
          out = tp->Forward(batch.pixels, batch.plan);
        }
        out.backward(upstream);
        sent[r] = stats.Total().tensor_bytes_sent;
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
  int64_t total = 0;
  for (int64_t s : sent) total += s;
  return total;
}

TEST(VisionTpTest, UlyssesMovesFewerBytesThanTp) {
  at::set_num_threads(1);
  const VisionConfig& c = testing::TinyVision();
  VisionTransformer source = testing::MakeTinyVision(7);
  const testing::VisionBatch batch = testing::MakeVisionBatch(testing::MixedGrids(), 11);
  at::manual_seed(13);
  const at::Tensor upstream = at::randn({batch.plan.num_units, c.out_hidden_size});
  for (int p : {2, 4}) {
    const int64_t sp_bytes = MeasuredGroupBytes(p, /*ulysses=*/true, batch, source, upstream);
    const int64_t tp_bytes = MeasuredGroupBytes(p, /*ulysses=*/false, batch, source, upstream);
    std::printf(
        "[vision bytes per step, %lld patches, degree %d] Ulysses SP %lld B, TP %lld B, "
        "TP/SP = %.2f\n",
        static_cast<long long>(batch.plan.num_patches), p, static_cast<long long>(sp_bytes),
        static_cast<long long>(tp_bytes), double(tp_bytes) / double(sp_bytes));
    EXPECT_GT(sp_bytes, 0);
    EXPECT_LT(sp_bytes, tp_bytes) << "degree " << p;
  }
}

}  // namespace
}  // namespace dhp
