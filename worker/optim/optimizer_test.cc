#include "worker/optim/optimizer.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "common/model_presets.h"
#include "gtest/gtest.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/optim/optimizer_state.h"

namespace dhp {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(OptimizerTest, GroupsTheTinyModelByName) {
  Qwen2_5_VL model(*FindModelPreset("tiny"));
  TrainingOptimizer::NamedParams params;
  for (const auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());
  TrainingOptimizer opt(params, OptimizerConfig{});
  const auto& decay = opt.decay_names();
  const auto& no_decay = opt.no_decay_names();
  EXPECT_EQ(decay.size() + no_decay.size(), params.size());

  for (const char* name : {"visual.blocks.0.norm1.weight", "visual.blocks.3.norm2.weight",
                           "visual.merger.ln_q.weight", "visual.blocks.0.attn.qkv.bias",
                           "visual.blocks.0.mlp.gate_proj.bias", "model.layers.0.self_attn.q_proj.bias",
                           "model.layers.1.input_layernorm.weight",
                           "model.layers.1.post_attention_layernorm.weight", "model.norm.weight"}) {
    EXPECT_TRUE(Contains(no_decay, name)) << name;
  }
  for (const char* name : {"lm_head.weight", "model.embed_tokens.weight",
                           "model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
                           "visual.patch_embed.proj.weight", "visual.blocks.0.attn.qkv.weight",
                           "visual.merger.mlp.0.weight"}) {
    EXPECT_TRUE(Contains(decay, name)) << name;
  }
  // Every no-decay parameter is 1-D; every decay parameter has >= 2 dims.
  for (const auto& [name, p] : params) {
    EXPECT_EQ(UsesWeightDecay(name, p), p.dim() >= 2) << name;
  }
}

TEST(OptimizerTest, NameRulesApplyBeyondShape) {
  EXPECT_FALSE(UsesWeightDecay("x.norm.weight", at::zeros({2, 2})));
  EXPECT_FALSE(UsesWeightDecay("x.proj.bias", at::zeros({2, 2})));
  EXPECT_FALSE(UsesWeightDecay("x.scale", at::zeros({2})));
  EXPECT_TRUE(UsesWeightDecay("x.proj.weight", at::zeros({2, 2})));
}

// Two parameters (a decaying matrix and a non-decaying bias), two AdamW steps with known
// gradients, compared with the closed-form AdamW update:
//   m_t = b1 m + (1-b1) g, v_t = b2 v + (1-b2) g^2, m^ = m_t / (1-b1^t), v^ = v_t / (1-b2^t),
//   p <- p * (1 - lr wd) - lr * m^ / (sqrt(v^) + eps).
TEST(OptimizerTest, AdamWStepsMatchTheClosedForm) {
  at::Tensor w = at::tensor({1.0, -2.0, 0.5, 3.0}, at::kDouble).view({2, 2}).set_requires_grad(true);
  at::Tensor b = at::tensor({0.25, -0.75}, at::kDouble).set_requires_grad(true);
  OptimizerConfig config;
  config.learning_rate = 0.1;
  config.weight_decay = 0.5;
  config.grad_clip_norm = 0;
  TrainingOptimizer opt({{"layer.weight", w}, {"layer.bias", b}}, config);
  ASSERT_EQ(opt.decay_names(), std::vector<std::string>{"layer.weight"});
  ASSERT_EQ(opt.no_decay_names(), std::vector<std::string>{"layer.bias"});

  const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
  std::vector<double> pw = {1.0, -2.0, 0.5, 3.0}, pb = {0.25, -0.75};
  std::vector<double> mw(4, 0), vw(4, 0), mb(2, 0), vb(2, 0);
  const std::vector<std::vector<double>> gw = {{0.5, -1.0, 2.0, 0.0}, {-0.5, 0.25, 1.0, 4.0}};
  const std::vector<std::vector<double>> gb = {{1.0, -0.1}, {0.3, 0.2}};
  const double lrs[2] = {0.1, 0.05};
  auto update = [&](std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                    const std::vector<double>& g, double lr, double wd, int t) {
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = v[i] / (1 - std::pow(b2, t));
      p[i] = p[i] * (1 - lr * wd) - lr * mhat / (std::sqrt(vhat) + eps);
    }
  };
  for (int t = 1; t <= 2; ++t) {
    opt.ZeroGrad();
    w.mutable_grad() = at::tensor(gw[t - 1], at::kDouble).view({2, 2});
    b.mutable_grad() = at::tensor(gb[t - 1], at::kDouble);
    opt.SetLearningRate(lrs[t - 1]);
    opt.Step();
    update(pw, mw, vw, gw[t - 1], lrs[t - 1], 0.5, t);
    update(pb, mb, vb, gb[t - 1], lrs[t - 1], 0.0, t);
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(w.view({-1})[i].item<double>(), pw[i], 1e-12) << "step " << t << " w" << i;
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(b[i].item<double>(), pb[i], 1e-12) << "step " << t << " b" << i;
    }
    // By hand, step 1 of w[0]: 1 * (1 - 0.1 * 0.5) - 0.1 * 0.5 / (0.5 + 1e-8) = 0.85 (Adam's
    // first step moves every coordinate by lr * sign(g)).
    if (t == 1) {
      EXPECT_NEAR(w.view({-1})[0].item<double>(), 0.85, 1e-7);
    }
  }
}

// A bf16 parameter trains through an fp32 master: after each step the master equals an fp32
// parameter stepped with the same (bf16-representable) gradients, and the bf16 parameter is
// the master rounded. The checkpoint tensors carry the master; a checkpoint with moments but no
// master is refused for a bf16 parameter, and loading one restores master and parameter.
TEST(OptimizerTest, Bf16ParametersKeepAnFp32MasterAndFp32Moments) {
  const at::Tensor init = at::tensor({1.001f, -2.003f, 0.5007f, 3.0011f}).view({2, 2});
  at::Tensor w16 = init.to(at::kBFloat16).set_requires_grad(true);
  at::Tensor w32 = init.to(at::kBFloat16).to(at::kFloat).set_requires_grad(true);
  OptimizerConfig config;
  config.learning_rate = 1e-4;  // far below bf16's resolution at these values
  config.weight_decay = 0.1;
  TrainingOptimizer opt16({{"w", w16}}, config), opt32({{"w", w32}}, config);
  ASSERT_TRUE(opt16.MasterOf(w16).defined());
  EXPECT_FALSE(opt32.MasterOf(w32).defined());  // fp32 parameters are their own master
  const at::Tensor before = w16.detach().clone();
  for (int t = 0; t < 3; ++t) {
    const at::Tensor g = at::tensor({0.5f, -1.0f, 2.0f, 0.25f}).view({2, 2}) * (t + 1);
    w16.mutable_grad() = g.to(at::kBFloat16);
    w32.mutable_grad() = g;
    opt16.Step();
    opt32.Step();
  }
  const at::Tensor master = opt16.MasterOf(w16);
  EXPECT_EQ(master.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(master, w32.detach(), 0, 1e-7));
  EXPECT_TRUE(at::equal(w16.detach(), master.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(w16.detach(), before));  // 3 x 1e-4 < half of bf16's step (2^-8 at 0.5)
  EXPECT_FALSE(at::equal(master, before.to(at::kFloat)));
  EXPECT_EQ(opt16.StateOf(w16, false)->exp_avg().scalar_type(), at::kFloat);

  const TrainingOptimizer::NamedParams params = {{"w", w16}};
  auto state = AdamWStateTensors(opt16, params, "optim.");
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  ASSERT_EQ(by_name.count("optim.w.master"), 1u);
  std::map<std::string, at::Tensor> no_master = by_name;
  no_master.erase("optim.w.master");
  absl::StatusOr<AdamWTakenState> refused = TakeAdamWState(params, "optim.", &no_master);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("optim.w.master is missing"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(no_master.size(), 3u);  // nothing taken

  // Load into a fresh optimizer: master, moments and the parameter come back exactly.
  at::Tensor fresh = init.to(at::kBFloat16).set_requires_grad(true);
  TrainingOptimizer opt2({{"w", fresh}}, config);
  const TrainingOptimizer::NamedParams fresh_params = {{"w", fresh}};
  absl::StatusOr<AdamWTakenState> taken = TakeAdamWState(fresh_params, "optim.", &by_name);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(by_name.empty());
  SetAdamWState(opt2, fresh_params, *taken);
  EXPECT_TRUE(at::equal(opt2.MasterOf(fresh), master));
  EXPECT_TRUE(at::equal(fresh.detach(), w16.detach()));
  EXPECT_TRUE(at::equal(opt2.StateOf(fresh, false)->exp_avg_sq(),
                        opt16.StateOf(w16, false)->exp_avg_sq()));
}

TEST(OptimizerTest, ClipReturnsThePreClipNormAndScales) {
  at::Tensor a = at::zeros({2}, at::kDouble).set_requires_grad(true);
  at::Tensor c = at::zeros({1, 1}, at::kDouble).set_requires_grad(true);
  OptimizerConfig config;
  config.grad_clip_norm = 1.0;
  TrainingOptimizer opt({{"a", a}, {"c", c}}, config);
  a.mutable_grad() = at::tensor({3.0, 0.0}, at::kDouble);
  c.mutable_grad() = at::tensor({4.0}, at::kDouble).view({1, 1});
  EXPECT_NEAR(opt.ClipGradNorm(), 5.0, 1e-6);  // sqrt(3^2 + 4^2)
  EXPECT_NEAR(a.grad()[0].item<double>(), 3.0 / 5.0, 1e-6);
  EXPECT_NEAR(c.grad()[0][0].item<double>(), 4.0 / 5.0, 1e-6);
  // Below the threshold: nothing changes.
  EXPECT_NEAR(opt.ClipGradNorm(), 1.0, 1e-6);
  EXPECT_NEAR(a.grad()[0].item<double>(), 3.0 / 5.0, 1e-6);
}

TEST(OptimizerTest, ZeroClipNormOnlyMeasures) {
  at::Tensor a = at::zeros({2}, at::kFloat).set_requires_grad(true);
  OptimizerConfig config;
  config.grad_clip_norm = 0;
  TrainingOptimizer opt({{"a", a}}, config);
  a.mutable_grad() = at::tensor({30.0f, 40.0f});
  EXPECT_NEAR(opt.ClipGradNorm(), 50.0, 1e-4);
  EXPECT_FLOAT_EQ(a.grad()[1].item<float>(), 40.0f);
  opt.ZeroGrad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_EQ(opt.ClipGradNorm(), 0.0);
}

}  // namespace
}  // namespace dhp
