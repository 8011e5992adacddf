// The TP building blocks against their single-rank definitions, on real Gloo groups with ranks
// as threads: column/row-parallel linears (even and uneven shards, biases), the vocab-parallel
// embedding and cross entropy (-100 labels, packed samples, large logits), the gradient sync of
// replicated shards, data-parallel gradient reduction and re-assembly.
#include "worker/parallel/tp_layers.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <vector>

#include "worker/comm/autograd_collectives.h"
#include "worker/comm/comm_stats.h"
#include "worker/comm/comm_test_util.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/rank_threads.h"
#include "worker/model/text_model.h"
#include "worker/parallel/tp_state.h"
#include "worker/parallel/vocab_parallel.h"

namespace dhp::tp {
namespace {

using comm::CommStats;
using comm::InMemoryKvClient;
using comm::MakeTestComm;
using comm::RunRanks;

// ||a - b|| <= tol * ||b|| (plus a floor for all-zero references).
void ExpectClose(const at::Tensor& a, const at::Tensor& b, const std::string& what,
                 double tol = 1e-5) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double err = (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>();
  const double ref = b.to(at::kDouble).norm().item<double>();
  EXPECT_LE(err, tol * ref + 1e-9) << what << ": |a-b| " << err << " |b| " << ref;
}

at::Tensor Leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }

at::Tensor Ids(std::vector<int64_t> v) { return at::tensor(v); }

class TpLayersTest : public ::testing::TestWithParam<int> {};

TEST_P(TpLayersTest, ColumnThenRowEqualsFullLinears) {
  const int t = GetParam();
  at::manual_seed(3);
  const at::Tensor w1 = at::randn({10, 6}), b1 = at::randn({10});  // 10 columns: uneven at 3, 4
  const at::Tensor w2 = at::randn({5, 10}), b2 = at::randn({5});
  const at::Tensor x0 = at::randn({4, 6}), probe = at::randn({4, 5});
  // Single rank.
  at::Tensor x = Leaf(x0), fw1 = Leaf(w1), fb1 = Leaf(b1), fw2 = Leaf(w2), fb2 = Leaf(b2);
  at::Tensor y_ref = at::linear(at::silu(at::linear(x, fw1, fb1)), fw2, fb2);
  (y_ref * probe).sum().backward();

  InMemoryKvClient kv;
  RunRanks(t, [&](int r) {
    CommStats stats;
    auto comm = MakeTestComm(kv, "text.tp0", t, r, &stats);
    ASSERT_NE(comm, nullptr);
    const std::vector<ShardRange> cols = EvenShards(10, t);
    ColumnParallelLinear col(w1, b1, r, t);
    RowParallelLinear row(w2, b2, *comm);  // even split, as cols
    EXPECT_EQ(col->weight.sizes(), (std::vector<int64_t>{cols[r].length, 6}));
    EXPECT_EQ(row->weight.sizes(), (std::vector<int64_t>{5, cols[r].length}));
    at::Tensor xr = Leaf(x0);
    at::Tensor y = row(at::silu(col(comm::CopyToParallelRegion(xr, *comm))));  // [4, 5]
    ExpectClose(y, y_ref, "output");
    (y * probe).sum().backward();
    ExpectClose(xr.grad(), x.grad(), "d input");
    ExpectClose(col->weight.grad(), fw1.grad().narrow(0, cols[r].start, cols[r].length), "dW1");
    ExpectClose(col->bias.grad(), fb1.grad().narrow(0, cols[r].start, cols[r].length), "db1");
    ExpectClose(row->weight.grad(), fw2.grad().narrow(1, cols[r].start, cols[r].length), "dW2");
    ExpectClose(row->bias.grad(), fb2.grad(), "db2 (replicated)");
    // Re-assembly of the shards gives back the full tensors.
    torch::nn::Module both;
    both.register_module("col", col);
    both.register_module("row", row);
    const ShardLayout layout = CollectShardLayout(both);
    EXPECT_EQ(layout.size(), 3u);  // col.weight, col.bias, row.weight; row.bias is replicated
    auto params = GatherFullTensors(both, layout, *comm, TensorKind::kParameters);
    ASSERT_TRUE(params.ok()) << params.status();
    for (const auto& [name, full] : *params) {
      const at::Tensor& want = name == "col.weight"   ? w1
                               : name == "col.bias"   ? b1
                               : name == "row.weight" ? w2
                                                      : b2;
      EXPECT_TRUE(at::equal(full, want)) << name;
    }
    auto grads = GatherFullTensors(both, layout, *comm, TensorKind::kGradients);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ExpectClose((*grads)[2].second, fw2.grad(), "gathered dW2");
    // Forward: one all-reduce of [4, 5]; backward: one of [4, 6] (CopyToParallelRegion).
    // Bytes by tensor size, 2N(t-1)/t rounded down, for N = 4*5*4 = 80 B and 4*6*4 = 96 B:
    //   t = 2: 80 + 96 = 176; t = 3: 320/3 = 106 + 384/3 = 128 -> 234; t = 4: 120 + 144 = 264.
    if (t > 1) {
      const int64_t sent = t == 2 ? 176 : t == 3 ? 234 : 264;
      EXPECT_EQ(stats.Get("text.tp0", comm::kOpAllReduce), (comm::CommCounters{2, sent, sent}));
    }
  });
}

TEST_P(TpLayersTest, VocabParallelEmbeddingEqualsFullLookup) {
  const int t = GetParam();
  at::manual_seed(4);
  const at::Tensor table = at::randn({10, 4});  // uneven at 3 and 4
  const at::Tensor ids = Ids({9, 0, 3, 3, 7, 5, 1, 8});
  const at::Tensor probe = at::randn({8, 4});
  at::Tensor full = Leaf(table);
  (at::embedding(full, ids) * probe).sum().backward();

  InMemoryKvClient kv;
  RunRanks(t, [&](int r) {
    auto comm = MakeTestComm(kv, "text.tp0", t, r, nullptr);
    ASSERT_NE(comm, nullptr);
    VocabParallelEmbedding emb(table, *comm);
    at::Tensor y = emb(ids);
    EXPECT_TRUE(at::equal(y, at::embedding(table, ids)));
    (y * probe).sum().backward();
    const ShardRange mine = emb->range();
    ExpectClose(emb->weight.grad(), full.grad().narrow(0, mine.start, mine.length), "d table");
  });
}

// Packed samples [0, 4) and [4, 9), -100 labels; `scale` makes the logits large.
void CheckVocabParallelLoss(int t, double scale) {
  at::manual_seed(5);
  const int64_t s_len = 9, vocab = 10;
  const at::Tensor logits0 = at::randn({s_len, vocab}) * scale;
  const at::Tensor labels = Ids({1, -100, 9, 4, 0, 7, -100, 2, 5});
  const std::vector<int64_t> cu = {0, 4, 9};
  at::Tensor logits = Leaf(logits0);
  auto [sum_ref, count_ref] = CausalLmLossSum(logits, labels, cu);
  sum_ref.backward();
  ASSERT_EQ(count_ref.item<int64_t>(), 5);  // 8 shifted targets, 2 ignored, 1 crosses a bound

  InMemoryKvClient kv;
  RunRanks(t, [&](int r) {
    CommStats stats;
    auto comm = MakeTestComm(kv, "text.tp0", t, r, &stats);
    ASSERT_NE(comm, nullptr);
    const ShardRange mine = EvenShards(vocab, t)[r];
    at::Tensor local = Leaf(logits0.narrow(1, mine.start, mine.length));  // [S, V_r]
    auto [sum, count] = VocabParallelCausalLmLossSum(local, labels, cu, mine.start, *comm);
    EXPECT_EQ(count.item<int64_t>(), 5);
    ExpectClose(sum, sum_ref.detach(), "loss sum");
    sum.backward();
    ExpectClose(local.grad(), logits.grad().narrow(1, mine.start, mine.length), "d logits");
    // Forward only: max [S] fp32 (N = 9*4 = 36 B) and (sum-exp, target) [S, 2] fp32 (N = 72 B);
    // bytes by tensor size 2N(t-1)/t rounded down:
    //   t = 2: 36 + 72 = 108; t = 3: 144/3 = 48 + 288/3 = 96 -> 144; t = 4: 54 + 108 = 162.
    if (t > 1) {
      const int64_t sent = t == 2 ? 108 : t == 3 ? 144 : 162;
      EXPECT_EQ(stats.Get("text.tp0", comm::kOpAllReduce), (comm::CommCounters{2, sent, sent}));
    }
  });
}

TEST_P(TpLayersTest, VocabParallelLossEqualsCausalLmLossSum) {
  CheckVocabParallelLoss(GetParam(), 1.0);
}
TEST_P(TpLayersTest, VocabParallelLossIsStableForLargeLogits) {
  CheckVocabParallelLoss(GetParam(), 200.0);
}

INSTANTIATE_TEST_SUITE_P(Degrees, TpLayersTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

TEST(CausalLmTargetsTest, ShiftsWithinSamples) {
  const at::Tensor labels = Ids({1, 2, 3, -100, 5, 6});
  EXPECT_TRUE(at::equal(CausalLmTargets(labels, {0, 3, 6}), Ids({2, 3, -100, 5, 6, -100})));
  EXPECT_TRUE(at::equal(CausalLmTargets(labels, {}), Ids({2, 3, -100, 5, 6, -100})));
}

// Rows held by two ranks each (as replicated KV heads): each holder has a partial gradient;
// FinishTpGradients sums them, and re-assembly then gives the single-rank gradient.
TEST(TpStateTest, ReplicatedShardsGetTheSumOfPartialGradients) {
  const int t = 4;
  at::manual_seed(6);
  const at::Tensor w = at::randn({4, 3}), b = at::randn({4});
  const std::vector<ShardRange> rows = {{0, 2}, {0, 2}, {2, 2}, {2, 2}};
  std::vector<at::Tensor> inputs;  // rank r's input; the single-rank model sees all four
  for (int r = 0; r < t; ++r) inputs.push_back(at::randn({2, 3}));
  at::Tensor fw = Leaf(w), fb = Leaf(b);
  for (int r = 0; r < t; ++r) {
    // Rank r uses only its rows: the single-rank loss is the sum of the rank-local losses.
    at::Tensor y = at::linear(inputs[r], fw, fb).narrow(1, rows[r].start, 2);
    y.pow(2).sum().backward();
  }

  InMemoryKvClient kv;
  RunRanks(t, [&](int r) {
    CommStats stats;
    auto comm = MakeTestComm(kv, "text.tp0", t, r, &stats);
    ASSERT_NE(comm, nullptr);
    torch::nn::Module root;
    ColumnParallelLinear col(w, b, rows, r);
    root.register_module("proj", col);
    col(inputs[r]).pow(2).sum().backward();
    const ShardLayout layout = CollectShardLayout(root);
    ASSERT_TRUE(layout.at("proj.weight").HasReplicas());
    ASSERT_TRUE(FinishTpGradients(root, layout, *comm).ok());
    ExpectClose(col->weight.grad(), fw.grad().narrow(0, rows[r].start, 2), "summed dW");
    auto grads = GatherFullTensors(root, layout, *comm, TensorKind::kGradients);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ExpectClose((*grads)[0].second, fw.grad(), "gathered dW");
    ExpectClose((*grads)[1].second, fb.grad(), "gathered db");
    auto sq = GradSquaredNorm(root, layout, *comm);
    ASSERT_TRUE(sq.ok()) << sq.status();
    const double want =
        fw.grad().pow(2).sum().item<double>() + fb.grad().pow(2).sum().item<double>();
    EXPECT_NEAR(*sq, want, 1e-5 * want);
  });
}

TEST(TpStateTest, DataParallelGradsAreSummedOrAveragedInBuckets) {
  const int dp = 3;
  InMemoryKvClient kv;
  RunRanks(dp, [&](int r) {
    CommStats stats;
    auto comm = MakeTestComm(kv, "text.dp0", dp, r, &stats);
    ASSERT_NE(comm, nullptr);
    torch::nn::Module m;
    at::Tensor a = m.register_parameter("a", at::zeros({5}));
    at::Tensor b = m.register_parameter("b", at::zeros({2, 3}));
    at::Tensor c = m.register_parameter("c", at::zeros({4}));  // no gradient on rank 0
    a.mutable_grad() = at::full({5}, double(r + 1));
    b.mutable_grad() = at::full({2, 3}, 10.0 * (r + 1));
    if (r > 0) c.mutable_grad() = at::full({4}, 1.0);
    // 30-byte buckets: a (20 B), b (24 B), c (16 B) each alone: three all-reduces.
    ASSERT_TRUE(AllReduceDataParallelGrads(m, *comm, DpGradReduce::kSum, 30).ok());
    EXPECT_TRUE(at::equal(a.grad(), at::full({5}, 6.0)));
    EXPECT_TRUE(at::equal(b.grad(), at::full({2, 3}, 60.0)));
    EXPECT_TRUE(at::equal(c.grad(), at::full({4}, 2.0)));
    EXPECT_EQ(stats.Get("text.dp0", comm::kOpAllReduce).calls, 3);
    ASSERT_TRUE(AllReduceDataParallelGrads(m, *comm, DpGradReduce::kMean).ok());
    EXPECT_TRUE(at::allclose(a.grad(), at::full({5}, 6.0)));
    EXPECT_EQ(stats.Get("text.dp0", comm::kOpAllReduce).calls, 4);
  });
}

}  // namespace
}  // namespace dhp::tp
