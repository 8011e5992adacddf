// Autograd-aware collectives over real Gloo groups (2 and 4 ranks, one thread each): forward
// values and gradients against their analytic expectations, even and uneven shards.
#include "worker/comm/autograd_collectives.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "worker/comm/comm_test_util.h"
#include "worker/comm/local_communicator.h"
#include "worker/comm/rank_threads.h"
#include "worker/comm/split_sizes.h"

namespace dhp::comm {
namespace {

// Rank q's loss weights for a tensor of `shape`: distinct per rank, exact in fp32.
at::Tensor W(int q, at::IntArrayRef shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return at::arange(n, at::kFloat).view(shape) * (q + 1) + q;
}

// Rank q's input: distinct per rank.
at::Tensor X(int q, at::IntArrayRef shape) {
  return (W(q, shape) * 0.5 + 100 * q).set_requires_grad(true);
}

class AutogradCollectivesTest : public ::testing::TestWithParam<int> {
 protected:
  int P() const { return GetParam(); }
  void Run(const std::function<void(Communicator&, CommStats&)>& body) {
    InMemoryKvClient kv;
    RunRanks(P(), [&](int rank) {
      CommStats stats;
      std::unique_ptr<Communicator> comm = MakeTestComm(kv, "g", P(), rank, &stats);
      ASSERT_NE(comm, nullptr);
      body(*comm, stats);
    });
  }
  std::vector<int64_t> Uneven() const {  // shard lengths, e.g. windows of different sizes
    std::vector<int64_t> s;
    for (int q = 0; q < P(); ++q) s.push_back(q % 2 == 0 ? 3 : 1);
    return s;
  }
};

// y = AllGather(x) along dim 1; loss_r = sum(w_r * y) -> x_r.grad = sum_q w_q[:, slice r].
TEST_P(AutogradCollectivesTest, AllGatherBackwardIsReduceScatter) {
  const int p = P();
  for (bool uneven : {false, true}) {
    std::vector<int64_t> sizes = uneven ? Uneven() : std::vector<int64_t>(p, 2);
    const std::vector<int64_t> off = RowOffsets(sizes);
    const int64_t total = off.back();
    Run([&](Communicator& c, CommStats& stats) {
      const int r = c.rank();
      at::Tensor x = X(r, {3, sizes[r]});
      at::Tensor y = AllGatherAlongDim(x, c, 1, uneven ? sizes : std::vector<int64_t>{});
      ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, total}));
      for (int q = 0; q < p; ++q) {
        EXPECT_TRUE(y.narrow(1, off[q], sizes[q]).equal(X(q, {3, sizes[q]}).detach()));
      }
      (W(r, {3, total}) * y).sum().backward();
      at::Tensor expected = at::zeros({3, sizes[r]});
      for (int q = 0; q < p; ++q) expected += W(q, {3, total}).narrow(1, off[r], sizes[r]);
      EXPECT_TRUE(x.grad().equal(expected)) << "uneven=" << uneven;
      EXPECT_EQ(stats.Get("g", kOpAllGather).calls, 1);
      EXPECT_EQ(stats.Get("g", kOpReduceScatter).calls, 1);
    });
  }
}

TEST_P(AutogradCollectivesTest, AllGatherSplitBackwardTakesOwnSlice) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    const int r = c.rank();
    at::Tensor x = X(r, {2, 3});
    at::Tensor y = AllGatherAlongDim(x, c, 0, {}, GatherGrad::kSplit);
    (W(r, {2 * p, 3}) * y).sum().backward();
    EXPECT_TRUE(x.grad().equal(W(r, {2 * p, 3}).narrow(0, 2 * r, 2)));
    EXPECT_EQ(stats.Get("g", kOpReduceScatter).calls, 0);  // no communication in backward
  });
}

// y_r = sum_q x_q[slice r]; loss_r = sum(w_r * y_r) -> x_q.grad = cat_r(w_r) on every rank.
TEST_P(AutogradCollectivesTest, ReduceScatterBackwardIsAllGather) {
  const int p = P();
  for (bool uneven : {false, true}) {
    std::vector<int64_t> sizes = uneven ? Uneven() : std::vector<int64_t>(p, 2);
    const std::vector<int64_t> off = RowOffsets(sizes);
    const int64_t total = off.back();
    Run([&](Communicator& c, CommStats&) {
      const int r = c.rank();
      at::Tensor x = X(r, {total, 2});
      at::Tensor y = ReduceScatterAlongDim(x, c, 0, uneven ? sizes : std::vector<int64_t>{});
      at::Tensor expected_y = at::zeros({sizes[r], 2});
      for (int q = 0; q < p; ++q)
        expected_y += X(q, {total, 2}).detach().narrow(0, off[r], sizes[r]);
      EXPECT_TRUE(y.equal(expected_y));
      (W(r, {sizes[r], 2}) * y).sum().backward();
      std::vector<at::Tensor> parts;
      for (int q = 0; q < p; ++q) parts.push_back(W(q, {sizes[q], 2}));
      EXPECT_TRUE(x.grad().equal(at::cat(parts))) << "uneven=" << uneven;
    });
  }
}

// Ulysses: x_r [s_r, H, D] (sequence shard, all heads) -> [S, H/P, D] (full sequence, own
// heads), and back. The global tensor G[s, h, d] encodes its indices.
TEST_P(AutogradCollectivesTest, UlyssesAllToAllRoundTripWithUnevenSequenceShards) {
  const int p = P();
  const int64_t heads = 2 * p, hd = 2;
  for (bool uneven : {false, true}) {
    std::vector<int64_t> seq = uneven ? Uneven() : std::vector<int64_t>(p, 2);
    const std::vector<int64_t> off = RowOffsets(seq);
    const int64_t total = off.back();
    const at::Tensor global = at::arange(total * heads * hd, at::kFloat).view({total, heads, hd});
    const at::Tensor weights = W(7, {total, heads, hd});
    Run([&](Communicator& c, CommStats& stats) {
      const int r = c.rank();
      const int64_t hp = heads / p;
      at::Tensor x = global.narrow(0, off[r], seq[r]).clone().set_requires_grad(true);
      // Sequence -> heads.
      at::Tensor y = AllToAllAlongDims(x, c, /*scatter_dim=*/1, /*gather_dim=*/0, {}, seq);
      ASSERT_EQ(y.sizes(), (std::vector<int64_t>{total, hp, hd}));
      EXPECT_TRUE(y.equal(global.narrow(1, r * hp, hp)));
      // loss on the head-sharded layout -> x.grad = the weights of this rank's sequence slice.
      (weights.narrow(1, r * hp, hp) * y).sum().backward();
      EXPECT_TRUE(x.grad().equal(weights.narrow(0, off[r], seq[r])));
      // Heads -> sequence: the inverse restores x, and the gradient passes through both.
      at::Tensor x2 = x.detach().clone().set_requires_grad(true);
      at::Tensor z = AllToAllAlongDims(AllToAllAlongDims(x2, c, 1, 0, {}, seq), c, 0, 1, seq, {});
      EXPECT_TRUE(z.equal(x.detach()));
      (weights.narrow(0, off[r], seq[r]) * z).sum().backward();
      EXPECT_TRUE(x2.grad().equal(weights.narrow(0, off[r], seq[r])));
      EXPECT_EQ(stats.Get("g", kOpAllToAll).calls, 2 + 4);  // (fwd + bwd) + 2 x (fwd + bwd)
    });
  }
}

TEST_P(AutogradCollectivesTest, CopyToParallelRegionAllReducesTheGradient) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    at::Tensor x = X(0, {2, 3});  // replicated input
    at::Tensor y = CopyToParallelRegion(x, c);
    EXPECT_TRUE(y.equal(x.detach()));
    (W(c.rank(), {2, 3}) * y).sum().backward();
    at::Tensor expected = at::zeros({2, 3});
    for (int q = 0; q < p; ++q) expected += W(q, {2, 3});
    EXPECT_TRUE(x.grad().equal(expected));
    EXPECT_EQ(stats.Get("g", kOpAllReduce).calls, 1);
  });
}

TEST_P(AutogradCollectivesTest, ReduceFromParallelRegionPassesTheGradient) {
  const int p = P();
  Run([p](Communicator& c, CommStats&) {
    at::Tensor x = X(c.rank(), {4});
    at::Tensor y = ReduceFromParallelRegion(x, c);
    at::Tensor expected = at::zeros({4});
    for (int q = 0; q < p; ++q) expected += X(q, {4}).detach();
    EXPECT_TRUE(y.equal(expected));
    (W(c.rank(), {4}) * y).sum().backward();
    EXPECT_TRUE(x.grad().equal(W(c.rank(), {4})));
  });
}

TEST_P(AutogradCollectivesTest, ScatterToParallelRegionGathersTheGradient) {
  const int p = P();
  std::vector<int64_t> sizes = Uneven();
  const std::vector<int64_t> off = RowOffsets(sizes);
  Run([&](Communicator& c, CommStats&) {
    const int r = c.rank();
    at::Tensor x = X(0, {off.back(), 2});  // the full sequence, replicated
    at::Tensor y = ScatterToParallelRegion(x, c, 0, sizes);
    EXPECT_TRUE(y.equal(x.detach().narrow(0, off[r], sizes[r])));
    (W(r, {sizes[r], 2}) * y).sum().backward();
    std::vector<at::Tensor> parts;
    for (int q = 0; q < p; ++q) parts.push_back(W(q, {sizes[q], 2}));
    EXPECT_TRUE(x.grad().equal(at::cat(parts)));
  });
}

// A Megatron MLP, y = relu(x A) B with A split by columns and B by rows, matches the unsplit
// computation in value and in every gradient.
TEST_P(AutogradCollectivesTest, TensorParallelMlpMatchesTheSingleRankResult) {
  const int p = P();
  const int64_t hidden = 3, inter = 4 * p;
  at::manual_seed(1);
  const at::Tensor x0 = at::randn({5, hidden}), a0 = at::randn({hidden, inter}),
                   b0 = at::randn({inter, hidden}), g = at::randn({5, hidden});
  at::Tensor x_ref = x0.clone().set_requires_grad(true), a_ref = a0.clone().set_requires_grad(true),
             b_ref = b0.clone().set_requires_grad(true);
  at::Tensor y_ref = at::relu(x_ref.matmul(a_ref)).matmul(b_ref);
  (y_ref * g).sum().backward();
  Run([&](Communicator& c, CommStats&) {
    const int r = c.rank();
    const int64_t shard = inter / p;
    at::Tensor x = x0.clone().set_requires_grad(true);
    at::Tensor a = a0.narrow(1, r * shard, shard).clone().set_requires_grad(true);
    at::Tensor b = b0.narrow(0, r * shard, shard).clone().set_requires_grad(true);
    at::Tensor h = at::relu(CopyToParallelRegion(x, c).matmul(a));
    at::Tensor y = ReduceFromParallelRegion(h.matmul(b), c);
    (y * g).sum().backward();
    EXPECT_TRUE(y.allclose(y_ref.detach(), 1e-5, 1e-5));
    EXPECT_TRUE(x.grad().allclose(x_ref.grad(), 1e-5, 1e-5));
    EXPECT_TRUE(a.grad().allclose(a_ref.grad().narrow(1, r * shard, shard), 1e-5, 1e-5));
    EXPECT_TRUE(b.grad().allclose(b_ref.grad().narrow(0, r * shard, shard), 1e-5, 1e-5));
  });
}

TEST_P(AutogradCollectivesTest, ErrorsThrowWithTheCommunicatorsMessage) {
  Run([](Communicator& c, CommStats&) {
    at::Tensor x = at::zeros({3});
    std::vector<int64_t> wrong(c.size(), 1);  // own entry disagrees with the 3 rows
    try {
      AllGatherAlongDim(x, c, 0, wrong);
      ADD_FAILURE() << "no error";
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what_without_backtrace(), ::testing::HasSubstr("all_gather on group g"));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, AutogradCollectivesTest, ::testing::Values(2, 4),
                         [](const auto& info) { return "P" + std::to_string(info.param); });

TEST(AutogradCollectivesSingleRankTest, GroupOfOneIsTheIdentity) {
  LocalCommunicator c("vision.sp0", nullptr);
  at::Tensor x = X(0, {2, 3});
  EXPECT_TRUE(AllGatherAlongDim(x, c, 0).is_same(x));
  EXPECT_TRUE(ReduceScatterAlongDim(x, c, 1).is_same(x));
  EXPECT_TRUE(AllToAllAlongDims(x, c, 1, 0).is_same(x));
  EXPECT_TRUE(CopyToParallelRegion(x, c).is_same(x));
  EXPECT_TRUE(ReduceFromParallelRegion(x, c).is_same(x));
  EXPECT_TRUE(ScatterToParallelRegion(x, c, 0).is_same(x));
}

}  // namespace
}  // namespace dhp::comm
