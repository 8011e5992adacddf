// Zero1AdamW against LibTorch's AdamW (TrainingOptimizer): one rank and 2/4 ranks over real Gloo
// (one thread per rank), 3 steps, with weight decay on the decay group only and clipping; and
// the optimizer state bytes per rank (1/N of the full state up to padding).
#include "worker/parallel/zero1.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/comm/comm_test_util.h"
#include "worker/comm/local_communicator.h"
#include "worker/comm/rank_threads.h"
#include "worker/optim/optimizer.h"

namespace dhp {
namespace {

using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

// A small mixed set: matrices (decay), biases and a norm weight (no decay), odd sizes so that the
// flat buffer needs padding for N = 2 and 4.
NamedParams MakeParams() {
  at::manual_seed(7);
  NamedParams p = {
      {"blocks.0.attn.qkv.weight", at::randn({6, 5})},
      {"blocks.0.attn.qkv.bias", at::randn({6})},
      {"blocks.0.norm1.weight", at::randn({5})},
      {"merger.mlp.0.weight", at::randn({3, 7})},
      {"patch_embed.proj.weight", at::randn({2, 3, 1, 1, 1})},
  };
  for (auto& [name, t] : p) t.set_requires_grad(true);
  return p;
}

// Rank r's partial gradient of parameter i at step s (deterministic); the reference uses the sum
// over ranks.
at::Tensor PartialGrad(const at::Tensor& p, int i, int step, int rank) {
  at::Generator gen = at::detail::createCPUGenerator(1000 * step + 100 * i + rank);
  return at::randn(p.sizes(), gen);
}

OptimizerConfig Config() {
  OptimizerConfig c;
  c.weight_decay = 0.1;
  c.grad_clip_norm = 1.0;
  return c;
}

constexpr double kLr[3] = {1e-2, 5e-3, 2e-3};

// Reference: TrainingOptimizer on the summed gradients, 3 steps, clipped by its own rule.
NamedParams Reference(int n) {
  NamedParams params = MakeParams();
  TrainingOptimizer opt(params, Config());
  for (int s = 0; s < 3; ++s) {
    opt.ZeroGrad();
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor g = at::zeros_like(params[i].second);
      for (int r = 0; r < n; ++r) g += PartialGrad(params[i].second, i, s, r);
      params[i].second.mutable_grad() = g;
    }
    opt.ClipGradNorm();
    opt.SetLearningRate(kLr[s]);
    opt.Step();
  }
  return params;
}

void ExpectClose(const NamedParams& got, const NamedParams& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = (got[i].second - want[i].second).abs().max().item<double>();
    EXPECT_LE(err, tol) << got[i].first;
  }
}

// Runs 3 Zero1AdamW steps on one rank of `comm` from `params` (made by MakeParams on the main
// thread: the global RNG is not for concurrent use); returns them, and the state bytes.
// With `bf16_grads` the gradients are rounded to bf16 (and given in the parameters' dtype).
NamedParams RunZero1(comm::Communicator& comm, NamedParams params, int64_t* state_bytes,
                     int64_t* full_numel, bool bf16_grads = false, at::Tensor* master = nullptr) {
  Zero1AdamW opt(params, Config(), comm);
  for (int s = 0; s < 3; ++s) {
    opt.ZeroGrad();
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor g = PartialGrad(params[i].second, i, s, comm.rank());
      if (bf16_grads) g = g.to(at::kBFloat16).to(params[i].second.scalar_type());
      params[i].second.mutable_grad() = g;
    }
    EXPECT_TRUE(opt.ReduceScatterGradients().ok());
    at::Tensor sq = at::tensor({opt.PartialGradSquaredNorm()}, at::kDouble);
    EXPECT_TRUE(comm.AllReduce(sq, comm::ReduceOp::kSum).ok());
    const double coef = ClipCoefficient(std::sqrt(sq.item<double>()), Config().grad_clip_norm);
    EXPECT_TRUE(opt.Step(kLr[s], coef).ok());
  }
  *state_bytes = opt.state_bytes();
  *full_numel = opt.full_numel();
  if (master != nullptr) *master = opt.State().master;
  return params;
}

TEST(Zero1AdamWTest, SingleRankMatchesTorchAdamW) {
  at::set_num_threads(1);
  comm::CommStats stats;
  comm::LocalCommunicator comm("vision", &stats);
  int64_t bytes = 0, numel = 0;
  NamedParams got = RunZero1(comm, MakeParams(), &bytes, &numel);
  ExpectClose(got, Reference(1), 1e-6);
  EXPECT_EQ(bytes, 3 * 4 * numel);
}

TEST(Zero1AdamWTest, NormWeightsScaleEachParametersSquaredNorm) {
  at::set_num_threads(1);
  comm::CommStats stats;
  comm::LocalCommunicator comm("vision", &stats);
  NamedParams params = MakeParams();
  std::vector<double> weights(params.size(), 1.0);
  weights[1] = 0.25;  // e.g. a parameter replicated over 4 tensor-parallel ranks
  Zero1AdamW opt(params, Config(), comm, weights);
  double want = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].second.mutable_grad() = PartialGrad(params[i].second, i, 0, 0);
    want += weights[i] * params[i].second.grad().to(at::kDouble).pow(2).sum().item<double>();
  }
  ASSERT_TRUE(opt.ReduceScatterGradients().ok());
  EXPECT_NEAR(opt.PartialGradSquaredNorm(), want, 1e-9 * want);
}

TEST(Zero1AdamWTest, ClipCoefficientRule) {
  EXPECT_EQ(ClipCoefficient(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(ClipCoefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(ClipCoefficient(4.0, 0.0), 1.0);
  EXPECT_EQ(ClipCoefficient(std::nan(""), 1.0), 1.0);
}

class Zero1GroupTest : public ::testing::TestWithParam<int> {};

TEST_P(Zero1GroupTest, ShardedMatchesTorchAdamWOnSummedGrads) {
  const int n = GetParam();
  const NamedParams want = Reference(n);
  std::vector<NamedParams> initial;
  for (int r = 0; r < n; ++r) initial.push_back(MakeParams());
  comm::InMemoryKvClient kv;
  comm::RunRanks(n, [&](int rank) {
    comm::CommStats stats;
    std::unique_ptr<comm::Communicator> comm = comm::MakeTestComm(kv, "vision", n, rank, &stats);
    ASSERT_NE(comm, nullptr);
    int64_t bytes = 0, numel = 0;
    NamedParams got = RunZero1(*comm, initial[rank], &bytes, &numel);
    ExpectClose(got, want, 1e-6);
    // State: master + m + v over this rank's partition only: exactly ceil(F/N) fp32 each.
    const int64_t part = (numel + n - 1) / n;
    EXPECT_EQ(bytes, 3 * 4 * part);
    EXPECT_LE(bytes * n - 3 * 4 * numel, 3 * 4 * (n - 1));  // padding only
    // Per step: one reduce-scatter of the padded flat gradient, one all-gather of a partition.
    EXPECT_EQ(stats.Get("vision", comm::kOpReduceScatter).calls, 3);
    // MakeParams has 30 + 6 + 5 + 21 + 6 = 68 elements. All-gather bytes by tensor size, N(P-1)
    // with N = one fp32 partition: n = 2: ceil(68/2) = 34 -> 136 B x 1 peer = 136 per step, 408
    // over 3 steps; n = 4: ceil(68/4) = 17 -> 68 B x 3 peers = 204 per step, 612 over 3 steps.
    EXPECT_EQ(numel, 68);
    const int64_t gathered = n == 2 ? 408 : 612;
    EXPECT_EQ(stats.Get("vision", comm::kOpAllGather), (comm::CommCounters{3, gathered, gathered}));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Zero1GroupTest, ::testing::Values(2, 4));

}  // namespace
}  // namespace dhp

namespace dhp {
namespace {

// MakeParams rounded to bf16, as fp32 or as bf16 tensors.
NamedParams Bf16Values(at::ScalarType dtype) {
  NamedParams p = MakeParams();
  for (auto& [name, t] : p) t = t.detach().to(at::kBFloat16).to(dtype).set_requires_grad(true);
  return p;
}

// bf16 parameters: the partition's master and moments stay fp32, and the updated partitions are
// all-gathered in bf16, half the bytes of fp32. With bf16-representable start values and
// gradients, the fp32 masters equal an fp32 run's parameters exactly (the update is the same fp32
// arithmetic) and the bf16 parameters are those rounded.
TEST(Zero1AdamWTest, Bf16ParametersKeepFp32MastersAndGatherInBf16) {
  const int n = 2;
  std::vector<NamedParams> init32, init16;
  for (int r = 0; r < n; ++r) {
    init32.push_back(Bf16Values(at::kFloat));
    init16.push_back(Bf16Values(at::kBFloat16));
  }
  std::vector<NamedParams> got32(n), got16(n);
  std::vector<at::Tensor> masters(n);
  std::vector<int64_t> gathered(n);
  for (const bool bf16 : {false, true}) {
    comm::InMemoryKvClient kv;
    comm::RunRanks(n, [&](int rank) {
      comm::CommStats stats;
      std::unique_ptr<comm::Communicator> comm = comm::MakeTestComm(kv, "vision", n, rank, &stats);
      ASSERT_NE(comm, nullptr);
      int64_t bytes = 0, numel = 0;
      if (bf16) {
        got16[rank] = RunZero1(*comm, init16[rank], &bytes, &numel, true, &masters[rank]);
        EXPECT_EQ(bytes, 3 * 4 * 34);  // fp32 master + moments of the 34-element partition
        gathered[rank] = stats.Get("vision", comm::kOpAllGather).tensor_bytes_sent;
      } else {
        got32[rank] = RunZero1(*comm, init32[rank], &bytes, &numel, true);
      }
    });
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(gathered[r], 204) << "34 bf16 elements x 1 peer x 3 steps, half of fp32's 408";
    ASSERT_EQ(got16[r].size(), got32[r].size());
    std::vector<at::Tensor> flat;
    for (size_t i = 0; i < got16[r].size(); ++i) {
      const at::Tensor& p16 = got16[r][i].second;
      const at::Tensor& p32 = got32[r][i].second;
      EXPECT_EQ(p16.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(at::equal(p16, p32.detach().to(at::kBFloat16))) << got16[r][i].first;
      flat.push_back(p32.detach().reshape(-1));
    }
    const at::Tensor all = at::cat(flat);
    const at::Tensor mine = all.narrow(0, 34 * r, std::min<int64_t>(34, all.numel() - 34 * r));
    EXPECT_EQ(masters[r].scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(masters[r].narrow(0, 0, mine.numel()), mine)) << "rank " << r;
  }
}

}  // namespace
}  // namespace dhp
