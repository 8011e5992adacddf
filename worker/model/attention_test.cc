#include "worker/model/attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "worker/model/checkpoint.h"

namespace dhp {
namespace {

// softmax(q k^T / sqrt(D)) v per segment with explicit loops: q [S, Hq, D], k/v [S, Hkv, D].
at::Tensor NaiveVarlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::vector<int64_t>& cu, bool causal) {
  const int64_t rep = q.size(1) / k.size(1);
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i + 1 < cu.size(); ++i) {
    const int64_t st = cu[i], len = cu[i + 1] - cu[i];
    at::Tensor qs = q.narrow(0, st, len).transpose(0, 1);  // [Hq, L, D]
    at::Tensor ks = k.narrow(0, st, len).transpose(0, 1).repeat_interleave(rep, 0);
    at::Tensor vs = v.narrow(0, st, len).transpose(0, 1).repeat_interleave(rep, 0);
    at::Tensor s = at::matmul(qs, ks.transpose(1, 2)) / std::sqrt(double(q.size(2)));
    if (causal) {
      s = s.masked_fill(at::ones({len, len}, at::kBool).triu(1),
                        -std::numeric_limits<float>::infinity());
    }
    outs.push_back(at::matmul(at::softmax(s, -1), vs).transpose(0, 1));  // [L, Hq, D]
  }
  return at::cat(outs, 0);
}

TEST(VarlenAttentionTest, MatchesNaivePerSegmentWithGqaAndCausal) {
  at::manual_seed(1);
  // Segment lengths 5, 3, 5, 1, 7, 3: lengths repeat out of order, exercising the grouping.
  const std::vector<int64_t> cu = {0, 5, 8, 13, 14, 21, 24};
  at::Tensor q = at::randn({24, 4, 8});
  at::Tensor k = at::randn({24, 2, 8});
  at::Tensor v = at::randn({24, 2, 8});
  for (bool causal : {false, true}) {
    at::Tensor got = VarlenAttention(q, k, v, cu, causal);
    ASSERT_EQ(got.sizes(), q.sizes());
    EXPECT_TRUE(at::allclose(got, NaiveVarlen(q, k, v, cu, causal), 1e-5, 1e-6))
        << "causal=" << causal;
  }
  // One segment (the fast path) and the empty-bounds shorthand agree.
  EXPECT_TRUE(at::allclose(VarlenAttention(q, k, v, {}, true), NaiveVarlen(q, k, v, {0, 24}, true),
                           1e-5, 1e-6));
}

TEST(VarlenAttentionTest, SegmentsAreBitIndependent) {
  at::manual_seed(2);
  const std::vector<int64_t> cu = {0, 6, 12, 16, 22};
  at::Tensor q = at::randn({22, 2, 8}), k = at::randn({22, 2, 8}), v = at::randn({22, 2, 8});
  at::Tensor base = VarlenAttention(q, k, v, cu, false);
  // Perturb segment 1 (rows 6..11), which shares its length with segments 0 and 3.
  at::Tensor q2 = q.clone(), k2 = k.clone(), v2 = v.clone();
  q2.narrow(0, 6, 6).add_(1.0);
  k2.narrow(0, 6, 6).mul_(-2.0);
  v2.narrow(0, 6, 6).add_(3.0);
  at::Tensor pert = VarlenAttention(q2, k2, v2, cu, false);
  EXPECT_TRUE(at::equal(base.narrow(0, 0, 6), pert.narrow(0, 0, 6)));
  EXPECT_TRUE(at::equal(base.narrow(0, 12, 10), pert.narrow(0, 12, 10)));
  EXPECT_FALSE(at::allclose(base.narrow(0, 6, 6), pert.narrow(0, 6, 6)));
}

TEST(RotaryTest, RotateHalfAndIdentityAtPositionZero) {
  at::Tensor x = at::arange(4, at::kFloat).view({1, 1, 4});  // [0, 1, 2, 3]
  EXPECT_TRUE(at::equal(RotateHalf(x), at::tensor({-2.f, -3.f, 0.f, 1.f}).view({1, 1, 4})));
  at::Tensor cos = at::ones({1, 4}), sin = at::zeros({1, 4});
  EXPECT_TRUE(at::equal(ApplyRotary(x, cos, sin, true), x));
}

TEST(CheckpointTest, SameValuesAndGradientsAsPlainCall) {
  at::manual_seed(3);
  at::Tensor w = at::randn({6, 6}).requires_grad_(true);
  at::Tensor c = at::randn({6});  // captured, no grad
  BlockFn fn = [w, c](const at::Tensor& x) { return at::tanh(at::matmul(x, w) + c) * x; };

  at::Tensor x1 = at::randn({4, 6}).requires_grad_(true);
  at::Tensor y1 = fn(x1);
  y1.pow(2).sum().backward();
  at::Tensor gw1 = w.grad().clone(), gx1 = x1.grad().clone();
  w.mutable_grad().zero_();

  at::Tensor x2 = x1.detach().clone().requires_grad_(true);
  at::Tensor y2 = CheckpointedCall(fn, x2);
  EXPECT_TRUE(at::equal(y1, y2));
  y2.pow(2).sum().backward();
  EXPECT_TRUE(at::allclose(w.grad(), gw1, 1e-6, 1e-7));
  EXPECT_TRUE(at::allclose(x2.grad(), gx1, 1e-6, 1e-7));

  // An input that does not require grad still yields parameter gradients.
  w.mutable_grad().zero_();
  CheckpointedCall(fn, x1.detach()).pow(2).sum().backward();
  EXPECT_GT(w.grad().abs().sum().item<float>(), 0.f);
}

}  // namespace
}  // namespace dhp
