#include "worker/model/param_init.h"
#include "worker/model/qwen2_5_vl.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "common/model_presets.h"
#include "worker/model/layers.h"
#include "worker/model/param_count.h"
#include "worker/model/torch_status.h"

namespace dhp {
namespace {

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

Qwen2_5_VL MakeTiny(const ModelPreset& preset = Tiny()) {
  at::manual_seed(5);
  Qwen2_5_VL m(preset);
  InitQwenWeights(*m, 0.05);
  return m;
}

// Two samples: [text, image 4x6 (6 tokens), text] and [text, image 10x10 (25 tokens), text].
PackedBatch MakeBatch() {
  const SpecialTokens& tk = Tiny().tokens;
  std::vector<int64_t> ids, labels, cu = {0};
  auto sample = [&](int64_t image_tokens, int64_t answer) {
    for (int64_t t : std::vector<int64_t>{tk.im_start, 5, 6, tk.vision_start}) ids.push_back(t);
    for (int64_t i = 0; i < image_tokens; ++i) ids.push_back(tk.image_pad);
    ids.push_back(tk.vision_end);
    const size_t prompt = ids.size();
    for (int64_t i = 0; i < answer; ++i) ids.push_back(100 + 13 * i % 900);
    ids.push_back(tk.im_end);
    labels.resize(prompt, -100);
    for (size_t i = prompt; i < ids.size(); ++i) labels.push_back(ids[i]);
    cu.push_back(static_cast<int64_t>(ids.size()));
  };
  sample(6, 5);
  sample(25, 8);
  PackedBatch b;
  b.input_ids = at::tensor(ids);
  b.labels = at::tensor(labels);
  b.cu_seqlens = cu;
  b.image_grids = {{1, 4, 6}, {1, 10, 10}};
  b.pixel_values = at::randn({24 + 100, 1176});
  return b;
}

std::set<std::string> ExpectedNames(const ModelPreset& p) {
  std::set<std::string> n = {"visual.patch_embed.proj.weight", "visual.merger.ln_q.weight",
                             "visual.merger.mlp.0.weight",     "visual.merger.mlp.0.bias",
                             "visual.merger.mlp.2.weight",     "visual.merger.mlp.2.bias",
                             "model.embed_tokens.weight",      "model.norm.weight"};
  for (int i = 0; i < p.vision.depth; ++i) {
    const std::string b = "visual.blocks." + std::to_string(i) + ".";
    for (const char* s :
         {"norm1.weight", "norm2.weight", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
          "attn.proj.bias", "mlp.gate_proj.weight", "mlp.gate_proj.bias", "mlp.up_proj.weight",
          "mlp.up_proj.bias", "mlp.down_proj.weight", "mlp.down_proj.bias"}) {
      n.insert(b + s);
    }
  }
  for (int i = 0; i < p.text.num_layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    for (const char* s :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
          "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.k_proj.bias",
          "self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.o_proj.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      n.insert(l + s);
    }
  }
  if (!p.text.tie_word_embeddings) n.insert("lm_head.weight");
  return n;
}

TEST(Qwen2_5_VLTest, ParameterNamesAreTheCheckpointNames) {
  Qwen2_5_VL m = MakeTiny();
  std::set<std::string> got;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& p : m->named_parameters()) {
    got.insert(p.key());
    shapes[p.key()] = p.value().sizes().vec();
  }
  EXPECT_EQ(got, ExpectedNames(Tiny()));
  EXPECT_EQ(shapes["visual.patch_embed.proj.weight"], (std::vector<int64_t>{64, 3, 2, 14, 14}));
  EXPECT_EQ(shapes["visual.blocks.0.attn.qkv.weight"], (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(shapes["visual.merger.mlp.0.weight"], (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(shapes["visual.merger.mlp.2.weight"], (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(shapes["model.layers.1.self_attn.k_proj.weight"], (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shapes["model.layers.1.self_attn.o_proj.weight"], (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shapes["lm_head.weight"], (std::vector<int64_t>{1024, 64}));
  // No buffers: rotary tables are computed, not stored.
  EXPECT_TRUE(m->named_buffers().is_empty());
}

TEST(Qwen2_5_VLTest, AllocatedParametersMatchAnalyticCount) {
  for (bool tied : {false, true}) {
    ModelPreset p = Tiny();
    p.text.tie_word_embeddings = tied;
    Qwen2_5_VL m = MakeTiny(p);
    int64_t vision = 0, total = 0;
    for (const auto& t : m->visual->parameters()) vision += t.numel();
    for (const auto& t : m->parameters()) total += t.numel();
    const ParamCount c = CountParams(p.vision, p.text);
    EXPECT_EQ(vision, c.vision_total) << "tied=" << tied;
    EXPECT_EQ(total, c.total) << "tied=" << tied;
    EXPECT_EQ(ExpectedNames(p).size(), m->parameters().size()) << "tied=" << tied;
  }
}

TEST(Qwen2_5_VLTest, ScatterPutsImageEmbeddingsAtPadPositions) {
  at::Tensor embeds = at::zeros({6, 2});
  at::Tensor ids = at::tensor(std::vector<int64_t>{1, 9, 9, 2, 9, 3});
  at::Tensor image = at::tensor(std::vector<float>{1, 1, 2, 2, 3, 3}).view({3, 2});
  at::Tensor out = ScatterImageEmbeddings(embeds, ids, 9, image);
  EXPECT_TRUE(at::equal(out.select(1, 0), at::tensor(std::vector<float>{0, 1, 2, 0, 3, 0})));
  EXPECT_THROW(ScatterImageEmbeddings(embeds, ids, 9, image.narrow(0, 0, 2)), c10::Error);
}

TEST(Qwen2_5_VLTest, LossBackwardReachesEveryParameter) {
  Qwen2_5_VL m = MakeTiny();
  PackedBatch b = MakeBatch();
  at::Tensor loss = m->Loss(b);
  // At initialisation the loss is near ln(vocab).
  EXPECT_NEAR(loss.item<float>(), std::log(1024.0), 0.5);
  loss.backward();
  for (const auto& p : m->named_parameters()) {
    const at::Tensor& g = p.value().grad();
    ASSERT_TRUE(g.defined()) << p.key();
    EXPECT_TRUE(at::isfinite(g).all().item<bool>()) << p.key();
    EXPECT_GT(g.abs().sum().item<float>(), 0.f) << p.key();
  }
}

TEST(Qwen2_5_VLTest, ImagesInfluenceTheirOwnSampleOnly) {
  at::NoGradGuard no_grad;
  Qwen2_5_VL m = MakeTiny();
  PackedBatch b = MakeBatch();
  at::Tensor base = m->Logits(b);
  PackedBatch changed = b;
  changed.pixel_values = b.pixel_values.clone();
  changed.pixel_values.narrow(0, 24, 100).add_(1.0);  // image of sample 1
  at::Tensor out = m->Logits(changed);
  const int64_t s0 = b.cu_seqlens[1];
  EXPECT_TRUE(at::equal(base.narrow(0, 0, s0), out.narrow(0, 0, s0)));
  EXPECT_FALSE(
      at::allclose(base.narrow(0, s0, out.size(0) - s0), out.narrow(0, s0, out.size(0) - s0)));
}

TEST(Qwen2_5_VLTest, BadInputBecomesInvalidArgumentAtTheBoundary) {
  at::NoGradGuard no_grad;
  Qwen2_5_VL m = MakeTiny();
  PackedBatch b = MakeBatch();
  b.image_grids[1] = {1, 10, 12};  // 30 merged tokens, but the text has 25 pads for it
  b.pixel_values = at::randn({24 + 120, 1176});
  absl::StatusOr<at::Tensor> loss = CatchTorch("step", [&] { return m->Loss(b); });
  ASSERT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument) << loss.status();
  EXPECT_NE(loss.status().message().find("<|image_pad|>"), std::string::npos) << loss.status();
  EXPECT_TRUE(CatchTorch("step", [&] { m->Loss(MakeBatch()); }).ok());
}

TEST(Qwen2_5_VLTest, GradientCheckpointingGivesTheSameGradients) {
  PackedBatch b = MakeBatch();
  std::vector<at::Tensor> grads;
  std::vector<float> losses;
  for (bool ckpt : {false, true}) {
    Qwen2_5_VL m = MakeTiny();
    m->set_gradient_checkpointing(ckpt);
    at::Tensor loss = m->Loss(b);
    loss.backward();
    losses.push_back(loss.item<float>());
    std::vector<at::Tensor> g;
    for (const auto& p : m->parameters()) g.push_back(p.grad().flatten());
    grads.push_back(at::cat(g));
  }
  EXPECT_FLOAT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(at::allclose(grads[0], grads[1], 1e-4, 1e-6))
      << (grads[0] - grads[1]).abs().max().item<float>();
}

}  // namespace
}  // namespace dhp
