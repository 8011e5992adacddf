// Gradient accumulation in fp32 under bf16 (issue 13 §4, StageOptions::fp32_grad_accumulation in
// stage.h): the tiny model, ranks as threads over real Gloo, both stages in bf16.
//   - 8 micro-batches of the same shape and labelled-token count c, different tokens and pixels
//     (vision SP 2 x text TP 2, dp 1): the step's full gradient is the fp32 sum of the 8
//     micro-batches' bf16 gradients. Reference: g_k, the gradient of a step of micro-batch k
//     alone (loss / c); inside the 8-micro-batch step micro-batch k's backward runs on loss / 8c,
//     which is g_k / 8 exactly in bf16 (a power-of-two scale commutes with every rounding of a
//     backward that is linear in its incoming gradient), so the reference is the fp32 sum of the
//     g_k / 8. Accumulated in fp32 the step matches it to fp32 rounding (kFp32SumTol);
//     accumulated in bf16 (the option off) it does not (measured: see kFp32SumTol).
//   - dp 2, each replica 8 copies of one micro-batch: in fp32, 8 x g / 8 = g exactly, so the
//     reduced gradient is the one-micro-batch step's before its rounding to bf16: rounded, the
//     text gradients are bit-identical to that step's, the vision ZeRO-1 partition (fp32) is
//     identical, and so is the loss.
//   - One micro-batch changes nothing: the gradients stay bf16 (no fp32 buffer) and the losses,
//     norms, gradients and every rank's state after 2 steps are bit-identical with the option on
//     or off.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/layout.h"
#include "common/model_presets.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"
#include "worker/comm/rank_threads.h"
#include "worker/model/param_init.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/dist_test_util.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp {
namespace {

using NamedTensors = DistTrainer::NamedTensors;
using MicroBatches = std::vector<std::vector<PackedBatch>>;  // [dp][n]
using Grads = std::map<std::string, at::Tensor>;

constexpr int kMicro = 8;
// The largest difference from the fp32 sum that the test allows, relative to the largest
// element of the gradient, over all gradients. Measured (LibTorch 1.13, CPU): fp32
// accumulation 2.9e-8 (the vision ZeRO-1 sums in another order), bf16 accumulation 8.5e-3.
constexpr double kFp32SumTol = 1e-5;

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

comm::Layout MakeLayout(int dp) {
  comm::Layout l;
  l.vision_degree = 2;
  l.text_degree = 2;
  l.dp = dp;
  l.placement = comm::Placement::kCollocated;
  return l;
}

// Two images per sequence. Seeds of one residue mod 3 give the same answer lengths, hence the
// same labelled-token count (synthetic_batch.h).
PackedBatch Batch(int64_t seed) {
  const int64_t m = Tiny().vision.spatial_merge_size;
  absl::StatusOr<PackedBatch> b =
      MakePositionedSyntheticBatch(Tiny(), {{1, 2 * m, 3 * m}, {1, 2 * m, 2 * m}}, seed);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : PackedBatch{};
}

struct StepOut {
  double loss = 0, norm = 0;
  Grads grads;  // full HF-shaped, before clipping
};

// What a rank thread does with its trainers; `record` is true on world rank 0, which keeps the
// results (it hosts vision and text roles and sees every full gradient).
using RankBody = std::function<void(int rank, RankComms& comms, bool record)>;

void RunWorld(const comm::Layout& layout, const RankBody& body) {
  comm::InMemoryKvClient kv;
  comm::RunRanks(layout.WorldSize(), [&](int rank) {
    absl::StatusOr<RankComms> comms = MakeRankComms(kv, layout, rank, TestGroupOptions());
    ASSERT_TRUE(comms.ok()) << comms.status();
    body(rank, *comms, rank == 0);
  });
}

DistTrainerOptions Options(bool fp32_accumulation) {
  DistTrainerOptions o;
  o.optimizer.weight_decay = 0.1;
  o.schedule.peak = 1e-3;
  o.schedule.max_steps = 10;
  o.vision_dtype = o.text_dtype = at::kBFloat16;
  o.fp32_grad_accumulation = fp32_accumulation;
  return o;
}

std::unique_ptr<DistTrainer> MakeTrainer(const Qwen2_5_VL& model, RankComms& comms,
                                         bool fp32_accumulation) {
  absl::StatusOr<std::unique_ptr<DistTrainer>> t = DistTrainer::Create(
      Tiny(), model, *comms.groups, comms.handoff.get(), Options(fp32_accumulation));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

StepOut Step(DistTrainer& trainer, const MicroBatches& micro_batches) {
  absl::StatusOr<DistStepResult> r = trainer.Step(micro_batches, /*gather_grads=*/true);
  EXPECT_TRUE(r.ok()) << r.status();
  StepOut out;
  if (!r.ok()) return out;
  out.loss = r->loss;
  out.norm = r->grad_norm;
  for (auto& [name, g] : r->grads) out.grads[name] = g;
  return out;
}

// The same initial model on every rank (built here: the initialiser draws from the global RNG).
std::vector<Qwen2_5_VL> Models(int world) {
  std::vector<Qwen2_5_VL> models;
  for (int r = 0; r < world; ++r) {
    at::manual_seed(7);
    models.emplace_back(Tiny());
    InitQwenWeights(*models.back(), 0.05);
  }
  return models;
}

// max over the gradients of max|a - ref| / max|ref|.
double WorstRelative(const Grads& a, const Grads& ref) {
  double worst = 0;
  for (const auto& [name, r] : ref) {
    auto it = a.find(name);
    EXPECT_NE(it, a.end()) << name;
    if (it == a.end()) continue;
    const at::Tensor rd = r.to(at::kDouble);
    const double scale = rd.abs().max().item<double>();
    if (scale == 0) continue;
    worst = std::max(worst, (it->second.to(at::kDouble) - rd).abs().max().item<double>() / scale);
  }
  return worst;
}

TEST(DistGradAccumTest, EightMicroBatchesSumTheirBf16GradientsInFp32) {
  at::set_num_threads(1);
  const comm::Layout layout = MakeLayout(/*dp=*/1);
  std::vector<PackedBatch> micro;
  for (int k = 0; k < kMicro; ++k) micro.push_back(Batch(30 + 3 * k));
  for (const PackedBatch& b : micro) {
    EXPECT_EQ((b.labels != -100).sum().item<int64_t>(),
              (micro[0].labels != -100).sum().item<int64_t>());
  }
  const std::vector<Qwen2_5_VL> models = Models(layout.WorldSize());
  std::vector<StepOut> alone(kMicro);
  StepOut fp32, bf16;
  RunWorld(layout, [&](int rank, RankComms& comms, bool record) {
    for (int k = 0; k < kMicro; ++k) {
      std::unique_ptr<DistTrainer> t = MakeTrainer(models[rank], comms, true);
      ASSERT_NE(t, nullptr);
      StepOut out = Step(*t, {{micro[k]}});
      if (record) alone[k] = std::move(out);
    }
    for (bool fp32_accumulation : {true, false}) {
      std::unique_ptr<DistTrainer> t = MakeTrainer(models[rank], comms, fp32_accumulation);
      ASSERT_NE(t, nullptr);
      StepOut out = Step(*t, {micro});
      if (record) (fp32_accumulation ? fp32 : bf16) = std::move(out);
    }
  });
  // The fp32 sum of the micro-batches' bf16 gradients, each g_k / 8.
  Grads sum;
  for (const StepOut& a : alone) {
    for (const auto& [name, g] : a.grads) {
      const at::Tensor part = g.to(at::kFloat) / kMicro;
      auto [it, first] = sum.emplace(name, part);
      if (!first) it->second = it->second + part;
    }
  }
  ASSERT_FALSE(sum.empty());
  const double fp32_err = WorstRelative(fp32.grads, sum);
  const double bf16_err = WorstRelative(bf16.grads, sum);
  std::printf("8 bf16 micro-batches vs the fp32 sum of their gradients (max |diff| / max |ref|): "
              "fp32 accumulation %.3g, bf16 accumulation %.3g\n",
              fp32_err, bf16_err);
  EXPECT_LE(fp32_err, kFp32SumTol);
  EXPECT_GT(bf16_err, 10 * kFp32SumTol);  // what fp32 accumulation is for
  EXPECT_EQ(fp32.grads.at("model.embed_tokens.weight").scalar_type(), at::kFloat);
  double mean_loss = 0;
  for (const StepOut& a : alone) mean_loss += a.loss / kMicro;
  EXPECT_NEAR(fp32.loss, mean_loss, 1e-6 * mean_loss);
}

TEST(DistGradAccumTest, IdenticalMicroBatchesOverReplicasGiveTheOneMicroBatchGradient) {
  at::set_num_threads(1);
  const comm::Layout layout = MakeLayout(/*dp=*/2);
  const std::vector<PackedBatch> one = {Batch(40), Batch(41)};  // per replica
  MicroBatches eight(2);
  for (int d = 0; d < 2; ++d) eight[d].assign(kMicro, one[d]);
  const std::vector<Qwen2_5_VL> models = Models(layout.WorldSize());
  StepOut single, fp32, bf16;
  RunWorld(layout, [&](int rank, RankComms& comms, bool record) {
    std::unique_ptr<DistTrainer> t = MakeTrainer(models[rank], comms, true);
    ASSERT_NE(t, nullptr);
    StepOut out = Step(*t, {{one[0]}, {one[1]}});
    if (record) single = std::move(out);
    for (bool fp32_accumulation : {true, false}) {
      t = MakeTrainer(models[rank], comms, fp32_accumulation);
      ASSERT_NE(t, nullptr);
      out = Step(*t, eight);
      if (record) (fp32_accumulation ? fp32 : bf16) = std::move(out);
    }
  });
  ASSERT_FALSE(single.grads.empty());
  int64_t fp32_off = 0, bf16_off = 0, elements = 0;  // elements that differ after rounding
  for (const auto& [name, g] : single.grads) {
    const at::Tensor a = fp32.grads.at(name).to(g.scalar_type());
    const at::Tensor b = bf16.grads.at(name).to(g.scalar_type());
    fp32_off += (a != g).sum().item<int64_t>();
    bf16_off += (b != g).sum().item<int64_t>();
    elements += g.numel();
    EXPECT_TRUE(at::equal(a, g)) << name;
  }
  std::printf("8 identical micro-batches per replica vs 1: %lld of %lld gradient elements differ "
              "with fp32 accumulation, %lld with bf16 accumulation\n",
              static_cast<long long>(fp32_off), static_cast<long long>(elements),
              static_cast<long long>(bf16_off));
  EXPECT_GT(bf16_off, 0);
  EXPECT_EQ(single.grads.at("model.embed_tokens.weight").scalar_type(), at::kBFloat16);
  EXPECT_EQ(fp32.loss, single.loss);
}

TEST(DistGradAccumTest, OneMicroBatchIsUnchanged) {
  at::set_num_threads(1);
  const comm::Layout layout = MakeLayout(/*dp=*/2);
  const std::vector<Qwen2_5_VL> models = Models(layout.WorldSize());
  struct Run {
    std::vector<StepOut> steps;
    std::vector<NamedTensors> states;  // per world rank
  };
  Run on, off;
  on.states.resize(layout.WorldSize());
  off.states.resize(layout.WorldSize());
  std::mutex mu;  // guards the states
  RunWorld(layout, [&](int rank, RankComms& comms, bool record) {
    for (bool fp32_accumulation : {true, false}) {
      Run& run = fp32_accumulation ? on : off;
      std::unique_ptr<DistTrainer> t = MakeTrainer(models[rank], comms, fp32_accumulation);
      ASSERT_NE(t, nullptr);
      for (int s = 0; s < 2; ++s) {
        StepOut out = Step(*t, {{Batch(50 + s)}, {Batch(60 + s)}});
        if (record) run.steps.push_back(std::move(out));
      }
      absl::StatusOr<NamedTensors> st = t->State();
      ASSERT_TRUE(st.ok()) << st.status();
      std::lock_guard<std::mutex> lock(mu);
      run.states[rank] = *st;
    }
  });
  ASSERT_EQ(on.steps.size(), 2u);
  ASSERT_EQ(off.steps.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(on.steps[s].loss, off.steps[s].loss) << s;
    EXPECT_EQ(on.steps[s].norm, off.steps[s].norm) << s;
    for (const auto& [name, g] : off.steps[s].grads) {
      EXPECT_TRUE(at::equal(on.steps[s].grads.at(name), g)) << name;
      if (name.rfind("model.", 0) == 0) {
        EXPECT_EQ(g.scalar_type(), at::kBFloat16) << name;  // no fp32 buffer
      }
    }
  }
  for (size_t r = 0; r < on.states.size(); ++r) {
    ASSERT_EQ(on.states[r].size(), off.states[r].size());
    for (size_t i = 0; i < on.states[r].size(); ++i) {
      EXPECT_TRUE(at::equal(on.states[r][i].second, off.states[r][i].second))
          << "rank " << r << " " << on.states[r][i].first;
    }
  }
}

}  // namespace
}  // namespace dhp
