#include "worker/model/param_init.h"
#include "worker/model/text_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "common/model_presets.h"
#include "worker/model/layers.h"

namespace dhp {
namespace {

const TextConfig& TinyText() { return FindModelPreset("tiny")->text; }

TextForCausalLM MakeTiny(const TextConfig& config = TinyText()) {
  at::manual_seed(11);
  TextForCausalLM m(config);
  InitQwenWeights(*m, 0.05);
  return m;
}

// Text-only position ids [3, S] restarting at each sample bound.
at::Tensor TextPositions(const std::vector<int64_t>& cu) {
  std::vector<at::Tensor> parts;
  for (size_t i = 0; i + 1 < cu.size(); ++i) parts.push_back(at::arange(cu[i + 1] - cu[i]));
  return at::cat(parts).unsqueeze(0).expand({3, -1}).contiguous();
}

at::Tensor Logits(TextForCausalLM& m, const at::Tensor& ids, const std::vector<int64_t>& cu) {
  return m->Logits(m->forward(m->Embed(ids), TextPositions(cu), cu));
}

TEST(MropeTest, TextPositionsGiveOrdinaryRope) {
  const TextConfig& c = TinyText();  // head_dim 16
  at::Tensor pos = TextPositions({0, 5});
  auto [cos, sin] = MropeCosSin(c, pos, at::kFloat);
  ASSERT_EQ(cos.sizes(), (std::vector<int64_t>{5, 16}));
  at::Tensor inv = 1.0 / at::pow(c.rope_theta, at::arange(0, 16, 2, at::kFloat) / 16.0);
  at::Tensor f = at::outer(at::arange(5, at::kFloat), inv);
  EXPECT_TRUE(at::allclose(cos, at::cat({f, f}, -1).cos()));
  EXPECT_TRUE(at::allclose(sin, at::cat({f, f}, -1).sin()));
}

TEST(MropeTest, SectionsTakeTheirAxis) {
  const TextConfig& c = TinyText();  // mrope_section {2, 3, 3}: slots 0-1 t, 2-4 h, 5-7 w
  at::Tensor pos = at::tensor(std::vector<int64_t>{1, 2, 3}).view({3, 1});  // t=1, h=2, w=3
  auto [cos, sin] = MropeCosSin(c, pos, at::kFloat);
  at::Tensor inv = 1.0 / at::pow(c.rope_theta, at::arange(0, 16, 2, at::kFloat) / 16.0);
  at::Tensor axis = at::tensor({1.f, 1.f, 2.f, 2.f, 2.f, 3.f, 3.f, 3.f});
  at::Tensor half = (axis * inv).cos();
  EXPECT_TRUE(at::allclose(cos.view({16}), at::cat({half, half})));
}

TEST(TextModelTest, CausalLaterTokensDoNotChangeEarlierLogits) {
  at::NoGradGuard no_grad;
  TextForCausalLM m = MakeTiny();
  at::Tensor ids = at::randint(0, 1000, {12}, at::kLong);
  at::Tensor base = Logits(m, ids, {0, 12});
  at::Tensor changed = ids.clone();
  changed[8] = (ids[8].item<int64_t>() + 1) % 1000;
  changed[11] = (ids[11].item<int64_t>() + 7) % 1000;
  at::Tensor out = Logits(m, changed, {0, 12});
  EXPECT_TRUE(at::equal(base.narrow(0, 0, 8), out.narrow(0, 0, 8)));
  EXPECT_FALSE(at::allclose(base.narrow(0, 8, 4), out.narrow(0, 8, 4)));
}

TEST(TextModelTest, PackedSamplesAreIndependent) {
  at::NoGradGuard no_grad;
  TextForCausalLM m = MakeTiny();
  const std::vector<int64_t> cu = {0, 7, 16, 20};
  at::Tensor ids = at::randint(0, 1000, {20}, at::kLong);
  at::Tensor base = Logits(m, ids, cu);
  at::Tensor changed = ids.clone();
  changed.narrow(0, 7, 9).copy_(at::randint(0, 1000, {9}, at::kLong));  // sample 1 only
  at::Tensor out = Logits(m, changed, cu);
  EXPECT_TRUE(at::equal(base.narrow(0, 0, 7), out.narrow(0, 0, 7)));
  EXPECT_TRUE(at::equal(base.narrow(0, 16, 4), out.narrow(0, 16, 4)));
  // Each sample alone (positions from 0) gives its logits inside the pack.
  at::Tensor alone = Logits(m, ids.narrow(0, 7, 9), {0, 9});
  EXPECT_TRUE(at::allclose(alone, base.narrow(0, 7, 9), 1e-5, 1e-6));
}

TEST(TextModelTest, TiedEmbeddingsShareTheMatrix) {
  TextConfig c = TinyText();
  c.tie_word_embeddings = true;
  at::NoGradGuard no_grad;
  TextForCausalLM m = MakeTiny(c);
  EXPECT_FALSE(m->lm_head);
  for (const auto& p : m->named_parameters()) EXPECT_NE(p.key(), "lm_head.weight");
  at::Tensor h = at::randn({3, 64});
  EXPECT_TRUE(at::allclose(m->Logits(h), at::matmul(h, m->model->embed_tokens->weight.t())));
}

TEST(LossTest, NextTokenWithinSamplesOnly) {
  // Vocabulary 3, logits chosen so each position's log-softmax is known.
  at::Tensor logits = at::log(at::tensor({0.5f, 0.25f, 0.25f,  //
                                          0.1f, 0.8f, 0.1f,    //
                                          0.2f, 0.2f, 0.6f,    //
                                          0.25f, 0.25f, 0.5f,  //
                                          0.3f, 0.3f, 0.4f}))
                          .view({5, 3});
  // Samples [0, 3) and [3, 5). Position i is scored against labels[i + 1] inside its sample:
  // pos 0 -> label 1 (p 0.25), pos 1 -> -100, pos 2 -> none (last of sample 0), pos 3 -> 2 (0.5),
  // pos 4 -> none (last).
  at::Tensor labels = at::tensor(std::vector<int64_t>{0, 1, -100, 1, 2});
  auto [sum, count] = CausalLmLossSum(logits, labels, {0, 3, 5});
  EXPECT_EQ(count.item<int64_t>(), 2);
  EXPECT_NEAR(sum.item<float>(), -std::log(0.25) - std::log(0.5), 1e-5);
  EXPECT_NEAR(CausalLmLoss(logits, labels, {0, 3, 5}).item<float>(),
              (-std::log(0.25) - std::log(0.5)) / 2, 1e-5);
  // Nothing labelled: loss 0, not NaN.
  EXPECT_EQ(CausalLmLoss(logits, at::full({5}, int64_t{-100}), {0, 5}).item<float>(), 0.f);
}

TEST(TextModelTest, GradientCheckpointingMatches) {
  const std::vector<int64_t> cu = {0, 6, 10};
  at::Tensor ids = at::randint(0, 1000, {10}, at::kLong);
  at::Tensor labels = at::randint(0, 1000, {10}, at::kLong);
  std::vector<at::Tensor> losses, grads;
  for (bool ckpt : {false, true}) {
    TextForCausalLM m = MakeTiny();
    m->set_gradient_checkpointing(ckpt);
    at::Tensor loss = CausalLmLoss(Logits(m, ids, cu), labels, cu);
    loss.backward();
    losses.push_back(loss.detach());
    std::vector<at::Tensor> g;
    for (const auto& p : m->parameters()) g.push_back(p.grad().flatten());
    grads.push_back(at::cat(g));
  }
  EXPECT_TRUE(at::allclose(losses[0], losses[1]));
  EXPECT_TRUE(at::allclose(grads[0], grads[1], 1e-5, 1e-7));
}

}  // namespace
}  // namespace dhp
