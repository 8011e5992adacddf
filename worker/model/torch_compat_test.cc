#include "worker/model/torch_compat.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace dhp {
namespace {

TEST(TorchCompatTest, MatmulRuns) {
  at::Tensor a = at::arange(6, at::kFloat).view({2, 3});  // [[0,1,2],[3,4,5]]
  at::Tensor b = at::ones({3, 2}, at::kFloat);
  at::Tensor c = at::matmul(a, b);  // [2, 2]
  EXPECT_FLOAT_EQ(c[0][0].item<float>(), 3.0f);
  EXPECT_FLOAT_EQ(c[1][1].item<float>(), 12.0f);
}

// Reference attention computed by hand: softmax(q k^T / sqrt(d)) v.
at::Tensor NaiveAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          bool causal) {
  at::Tensor s = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(q.size(-1)));
  if (causal) {
    int64_t l = q.size(-2);
    at::Tensor mask = at::ones({l, l}, at::kBool).triu(1);
    s = s.masked_fill(mask, -std::numeric_limits<float>::infinity());
  }
  return at::matmul(at::softmax(s, -1), v);
}

TEST(TorchCompatTest, ScaledDotProductAttentionMatchesNaive) {
  at::manual_seed(0);
  at::Tensor q = at::randn({2, 3, 5, 8});  // [B, H, L, D]
  at::Tensor k = at::randn({2, 3, 5, 8});
  at::Tensor v = at::randn({2, 3, 5, 8});
  for (bool causal : {false, true}) {
    at::Tensor got = compat::ScaledDotProductAttention(q, k, v, causal);
    at::Tensor want = NaiveAttention(q, k, v, causal);
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6)) << "causal=" << causal;
  }
}

// The guard only flips thread-local state, so the CUDA case is testable without a GPU.
TEST(TorchCompatTest, CudaAutocastGuardSetsAndRestores) {
  const bool enabled0 = compat::IsAutocastEnabled(at::kCUDA);
  const at::ScalarType dtype0 = compat::AutocastDtype(at::kCUDA);
  {
    compat::AutocastGuard outer(at::kCUDA, at::kBFloat16);
    EXPECT_TRUE(compat::IsAutocastEnabled(at::kCUDA));
    EXPECT_EQ(compat::AutocastDtype(at::kCUDA), at::kBFloat16);
    {
      compat::AutocastGuard inner(at::kCUDA, at::kHalf);
      EXPECT_EQ(compat::AutocastDtype(at::kCUDA), at::kHalf);
    }
    EXPECT_TRUE(compat::IsAutocastEnabled(at::kCUDA));
    EXPECT_EQ(compat::AutocastDtype(at::kCUDA), at::kBFloat16);
    EXPECT_FALSE(compat::IsAutocastEnabled(at::kCPU));
    // CPU tensors are not affected.
    EXPECT_EQ(at::matmul(at::ones({2, 2}), at::ones({2, 2})).scalar_type(), at::kFloat);
  }
  EXPECT_EQ(compat::IsAutocastEnabled(at::kCUDA), enabled0);
  EXPECT_EQ(compat::AutocastDtype(at::kCUDA), dtype0);
}

TEST(TorchCompatTest, CpuAutocastGuardRunsMatmulInBf16AndRestores) {
  ASSERT_FALSE(compat::IsAutocastEnabled(at::kCPU));
  const at::Tensor a = at::randn({4, 8}), b = at::randn({8, 3});
  // The product of the bf16-rounded inputs, to bf16 precision (8 bits of significand).
  const at::Tensor want =
      at::matmul(a.to(at::kBFloat16).to(at::kFloat), b.to(at::kBFloat16).to(at::kFloat));
  {
    compat::AutocastGuard guard(at::kCPU, at::kBFloat16);
    EXPECT_TRUE(compat::IsAutocastEnabled(at::kCPU));
    EXPECT_FALSE(compat::IsAutocastEnabled(at::kCUDA));
    const at::Tensor c = at::matmul(a, b);
    EXPECT_EQ(c.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::allclose(c.to(at::kFloat), want, 1e-2, 1e-2));
    // Element-wise ops stay in the input dtype.
    EXPECT_EQ((a + a).scalar_type(), at::kFloat);
  }
  EXPECT_FALSE(compat::IsAutocastEnabled(at::kCPU));
  EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kFloat);
}

}  // namespace
}  // namespace dhp
