// Exact parity of the text stage under Megatron TP with a single-rank TextForCausalLM (tiny
// preset, fp32 CPU, real Gloo groups with ranks as threads): loss, every parameter's gradient
// re-assembled, the gradient w.r.t. the input embeddings (what flows back to vision) and w.r.t.
// scattered image embeddings, for TP 1, 2 (KV heads split) and 4 (KV heads replicated), tied and
// untied embeddings, packed samples with -100 labels; TP collective bytes against the formula in
// text_tp_model.h; TP x DP; gradient checkpointing.
#include "worker/model/param_init.h"
#include "worker/parallel/text_tp_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/model_presets.h"
#include "worker/comm/comm_stats.h"
#include "worker/comm/comm_test_util.h"
#include "worker/comm/failing_communicator.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/rank_threads.h"
#include "worker/model/layers.h"
#include "worker/model/text_model.h"
#include "worker/parallel/tp_state.h"

namespace dhp::tp {
namespace {

using comm::CommStats;
using comm::InMemoryKvClient;
using comm::RunRanks;

constexpr double kTol = 1e-5;

void ExpectClose(const at::Tensor& a, const at::Tensor& b, const std::string& what,
                 double tol = kTol) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double err = (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>();
  const double ref = b.to(at::kDouble).norm().item<double>();
  EXPECT_LE(err, tol * ref + 1e-9) << what << ": |a-b| " << err << " |b| " << ref;
}

TextConfig Tiny(bool tied) {
  TextConfig c = FindModelPreset("tiny")->text;  // H 64, 2 layers, 4 heads / 2 KV heads, V 1024
  c.tie_word_embeddings = tied;
  return c;
}

// The reference model, with non-trivial biases and norm weights (HF init leaves them 0 and 1).
TextForCausalLM MakeReference(const TextConfig& c) {
  at::manual_seed(11);
  TextForCausalLM m(c);
  InitQwenWeights(*m, 0.05);
  at::NoGradGuard no_grad;
  for (auto& item : m->named_parameters()) {
    if (item.value().dim() == 1) item.value().add_(at::randn_like(item.value()) * 0.1);
  }
  return m;
}

struct Batch {
  at::Tensor ids, labels, positions, image_rows, image_embeds;
  std::vector<int64_t> cu;
};

// Three packed samples, prompts labelled -100, five <|image_pad|> rows whose embeddings come
// from "vision".
Batch MakeBatch(const TextConfig& c, uint64_t seed) {
  at::manual_seed(seed);
  Batch b;
  b.cu = {0, 7, 16, 20};
  b.ids = at::randint(0, 1000, {20}, at::kLong);
  b.labels = b.ids.clone();
  for (int64_t i : {0, 1, 2, 7, 8, 16}) b.labels[i] = -100;
  std::vector<at::Tensor> pos;
  for (size_t i = 0; i + 1 < b.cu.size(); ++i) pos.push_back(at::arange(b.cu[i + 1] - b.cu[i]));
  b.positions = at::cat(pos).unsqueeze(0).expand({3, -1}).contiguous();  // [3, S]
  b.image_rows = at::tensor(std::vector<int64_t>{2, 3, 4, 9, 10});
  b.image_embeds = at::randn({5, c.hidden_size}) * 0.5;
  return b;
}

// The outputs compared between layouts.
struct StepResult {
  at::Tensor loss;                          // sum / count
  at::Tensor d_embeds;                      // [S, H]
  at::Tensor d_image;                       // [5, H]
  std::map<std::string, at::Tensor> grads;  // full HF-shaped, by name
};

// Embeddings with the image rows scattered in; `image` is the leaf standing for vision's output.
at::Tensor Scatter(const at::Tensor& embeds, const Batch& b, const at::Tensor& image) {
  return embeds.index_put({b.image_rows}, image);
}

// Single rank: the mean loss over every batch's counted tokens.
StepResult RunReference(TextForCausalLM& m, const std::vector<Batch>& batches) {
  StepResult out;
  at::Tensor sum = at::zeros({}), count = at::zeros({}, at::kLong);
  std::vector<at::Tensor> embeds, images;
  for (const Batch& b : batches) {
    at::Tensor image = b.image_embeds.clone().requires_grad_(true);
    at::Tensor e = Scatter(m->Embed(b.ids), b, image);
    e.retain_grad();
    auto [s, n] = CausalLmLossSum(m->Logits(m->forward(e, b.positions, b.cu)), b.labels, b.cu);
    sum = sum + s;
    count = count + n;
    embeds.push_back(e);
    images.push_back(image);
  }
  out.loss = sum / count.to(at::kFloat);
  out.loss.backward();
  out.d_embeds = embeds[0].grad();
  out.d_image = images[0].grad();
  for (const auto& item : m->named_parameters()) out.grads[item.key()] = item.value().grad();
  return out;
}

// The TP all-reduces of one step (text_tp_model.h) on the tiny preset with the batches above,
// as CommStats counts them: calls and bytes by tensor size, worked out by hand (not with
// comm::AllReduceVolume, which would check the counters' formula against itself).
// Tiny: H 64, L = 2 layers, 4 heads of d = 16, 2 KV heads; S = 20 tokens; fp32. Per call the
// ring formula 2N(t-1)/t: t = 2 -> N, t = 4 -> 1.5 N.
//   [S, H] activations, N = 20*64*4 = 5120 B (t = 4: 7680): forward 1 + 2L = 5 calls
//     (embedding, o_proj, down_proj), backward 2L + 1 = 5 (attention, MLP and LM-head inputs),
//     with checkpointing 2L = 4 more (recomputed forward)
//   cross entropy: max [S] fp32, N = 80 B (t = 4: 120), and (sum-exp, target logit) [S, 2],
//     N = 160 B (t = 4: 240): 1 call each
//   t = 4 > 2 KV heads (replicated k/v): one k/v gradient sum of L * 2 * KV * d * (H + 1) * 4 =
//     2*2*2*16*65*4 = 33280 B (t = 4: 49920)
// t = 2: 12 calls, 10*5120 + 80 + 160 = 51440 B; checkpointing 16 calls, +4*5120 = 71920 B.
// t = 4: 13 calls, 10*7680 + 120 + 240 + 49920 = 127080 B; checkpointing 17 calls,
//   +4*7680 = 157800 B.
comm::CommCounters ExpectedTpAllReduce(int t, bool checkpointing) {
  if (t == 2)
    return checkpointing ? comm::CommCounters{16, 71920, 71920}
                         : comm::CommCounters{12, 51440, 51440};
  if (t == 4)
    return checkpointing ? comm::CommCounters{17, 157800, 157800}
                         : comm::CommCounters{13, 127080, 127080};
  return {};  // t = 1: no all-reduce
}

struct Options {
  int tp = 1;
  int dp = 1;
  bool tied = false;
  bool checkpointing = false;
};

// Runs tp x dp ranks (replica d takes batch d) and compares everything with the reference.
void CheckParity(const Options& o) {
  const TextConfig c = Tiny(o.tied);
  TextForCausalLM ref = MakeReference(c);
  std::vector<Batch> batches;
  for (int d = 0; d < o.dp; ++d) batches.push_back(MakeBatch(c, 100 + d));
  at::set_num_threads(1);
  const StepResult want = RunReference(ref, batches);
  const int64_t s_len = batches[0].ids.size(0);

  InMemoryKvClient kv;
  const int world = o.tp * o.dp;
  RunRanks(world, [&](int w) {
    const int d = w / o.tp, r = w % o.tp;
    CommStats stats;
    comm::ProcessGroupsOptions popts;
    popts.arrival_timeout = popts.store_timeout = std::chrono::seconds(30);
    popts.collective_timeout = std::chrono::seconds(60);
    comm::GroupSpec tp_spec{"text.tp" + std::to_string(d), {}};
    comm::GroupSpec dp_spec{"text.dp" + std::to_string(r), {}};
    for (int i = 0; i < o.tp; ++i) tp_spec.world_ranks.push_back(d * o.tp + i);
    for (int i = 0; i < o.dp; ++i) dp_spec.world_ranks.push_back(i * o.tp + r);
    // Every rank creates its TP group first, then its DP group (no cycle of waits).
    auto made_tp = comm::CreateCommunicator(kv, tp_spec, w, popts, &stats);
    ASSERT_TRUE(made_tp.ok()) << made_tp.status();
    std::unique_ptr<comm::Communicator> tp = std::move(*made_tp);
    auto made_dp = comm::CreateCommunicator(kv, dp_spec, w, popts, &stats);
    ASSERT_TRUE(made_dp.ok()) << made_dp.status();
    std::unique_ptr<comm::Communicator> dp = std::move(*made_dp);

    auto created = CreateTextTpModel(c, ModuleTensorSource(*ref), *tp);
    ASSERT_TRUE(created.ok()) << created.status();
    TextTpModel m = *created;
    m->set_gradient_checkpointing(o.checkpointing);
    const Batch& b = batches[d];

    at::Tensor image = b.image_embeds.clone().requires_grad_(true);
    at::Tensor embeds = Scatter(m->Embed(b.ids), b, image);  // [S, H]
    embeds.retain_grad();
    at::Tensor hidden = m->Hidden(embeds, b.positions, b.cu);
    at::Tensor logits = m->LocalLogits(hidden);
    // No rank holds full-vocabulary logits.
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{s_len, c.vocab_size / o.tp}));
    auto [sum, count] =
        VocabParallelCausalLmLossSum(logits, b.labels, b.cu, m->plan().my_vocab().start, *tp);
    at::Tensor global_count = count.clone();
    if (dp->size() > 1) {
      ASSERT_TRUE(dp->AllReduce(global_count, comm::ReduceOp::kSum).ok());
    }
    at::Tensor loss = sum / global_count.to(at::kFloat);
    at::Tensor global_loss = loss.detach().clone();
    if (dp->size() > 1) {
      ASSERT_TRUE(dp->AllReduce(global_loss, comm::ReduceOp::kSum).ok());
    }
    ExpectClose(global_loss, want.loss.detach(), "loss");
    loss.backward();
    ASSERT_TRUE(FinishTpGradients(*m, m->shard_layout(), *tp).ok());
    ASSERT_EQ(s_len, 20);  // the hand-worked numbers of ExpectedTpAllReduce assume it
    EXPECT_EQ(stats.Get(tp->name(), comm::kOpAllReduce),
              ExpectedTpAllReduce(o.tp, o.checkpointing));
    ASSERT_TRUE(AllReduceDataParallelGrads(*m, *dp).ok());

    if (d == 0) {  // the reference's gradients w.r.t. embeddings are those of batch 0
      ExpectClose(embeds.grad(), want.d_embeds, "d inputs_embeds");
      ExpectClose(image.grad(), want.d_image, "d image embeddings");
    }
    auto grads = GatherFullTensors(*m, m->shard_layout(), *tp, TensorKind::kGradients);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ASSERT_EQ(grads->size(), want.grads.size());
    for (const auto& [name, g] : *grads) {
      ASSERT_TRUE(want.grads.count(name)) << "unexpected parameter " << name;
      ExpectClose(g, want.grads.at(name), "grad " + name);
    }
    auto params = GatherFullTensors(*m, m->shard_layout(), *tp, TensorKind::kParameters);
    ASSERT_TRUE(params.ok()) << params.status();
    const auto ref_params = ref->named_parameters();
    for (const auto& [name, p] : *params) EXPECT_TRUE(at::equal(p, ref_params[name])) << name;
    auto sq = GradSquaredNorm(*m, m->shard_layout(), *tp);
    ASSERT_TRUE(sq.ok()) << sq.status();
    double want_sq = 0;
    for (const auto& [name, g] : want.grads)
      want_sq += g.to(at::kDouble).pow(2).sum().item<double>();
    EXPECT_NEAR(*sq, want_sq, 1e-5 * want_sq);
    // forward() is the composition checked above.
    m->zero_grad();
    auto [sum2, count2] = m->forward(embeds.detach(), b.positions, b.labels, b.cu);
    ExpectClose(sum2, sum.detach(), "forward() loss sum");
    EXPECT_EQ(count2.item<int64_t>(), count.item<int64_t>());
  });
}

class TextTpParityTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(TextTpParityTest, MatchesSingleRank) {
  Options o;
  o.tp = std::get<0>(GetParam());
  o.tied = std::get<1>(GetParam());
  CheckParity(o);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TextTpParityTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return "tp" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_tied" : "_untied");
                         });

TEST(TextTpModelTest, GradientCheckpointingKeepsParity) {
  Options o;
  o.tp = 2;
  o.checkpointing = true;
  CheckParity(o);
}

TEST(TextTpModelTest, TensorAndDataParallel) {
  Options o;
  o.tp = 2;
  o.dp = 2;
  CheckParity(o);
}

TEST(TextTpModelTest, ParameterNamesAreTheCheckpointsAndShapesAreShards) {
  const TextConfig c = Tiny(false);
  TextForCausalLM ref = MakeReference(c);
  InMemoryKvClient kv;
  RunRanks(4, [&](int r) {
    auto tp = comm::MakeTestComm(kv, "text.tp0", 4, r, nullptr);
    ASSERT_NE(tp, nullptr);
    auto m = CreateTextTpModel(c, ModuleTensorSource(*ref), *tp);
    ASSERT_TRUE(m.ok()) << m.status();
    const auto mine = (*m)->named_parameters();
    const auto full = ref->named_parameters();
    EXPECT_EQ(mine.keys(), full.keys());
    EXPECT_EQ(mine["model.embed_tokens.weight"].sizes(), (std::vector<int64_t>{256, 64}));
    EXPECT_EQ(mine["lm_head.weight"].sizes(), (std::vector<int64_t>{256, 64}));
    EXPECT_EQ(mine["model.layers.0.self_attn.q_proj.weight"].sizes(),
              (std::vector<int64_t>{16, 64}));
    EXPECT_EQ(mine["model.layers.0.self_attn.k_proj.weight"].sizes(),
              (std::vector<int64_t>{16, 64}));  // one replicated KV head
    EXPECT_EQ(mine["model.layers.0.self_attn.o_proj.weight"].sizes(),
              (std::vector<int64_t>{64, 16}));
    EXPECT_EQ(mine["model.layers.1.mlp.down_proj.weight"].sizes(), (std::vector<int64_t>{64, 32}));
    EXPECT_EQ(mine["model.norm.weight"].sizes(), (std::vector<int64_t>{64}));
    const ShardLayout& layout = (*m)->shard_layout();
    EXPECT_EQ(layout.count("model.norm.weight"), 0u);
    EXPECT_EQ(layout.at("model.layers.0.self_attn.o_proj.weight").dim, 1);
    EXPECT_TRUE(layout.at("model.layers.0.self_attn.v_proj.bias").HasReplicas());
    EXPECT_FALSE(layout.at("model.layers.0.self_attn.q_proj.bias").HasReplicas());
    // Rank r's KV head is r / 2: the rows of the full k_proj it holds.
    EXPECT_TRUE(
        at::equal(mine["model.layers.0.self_attn.k_proj.weight"],
                  full["model.layers.0.self_attn.k_proj.weight"].narrow(0, 16 * (r / 2), 16)));
    // No collective ran: wait for every peer to finish connecting before this rank's group is
    // destroyed (Gloo fails a peer still connecting with "Connection closed by peer").
    EXPECT_TRUE(tp->Barrier().ok());
  });
}

TEST(TextTpModelTest, UnsupportedDegreeIsAStatus) {
  const TextConfig c = Tiny(false);
  TextForCausalLM ref = MakeReference(c);
  // A group of three that must never be used: the degree is refused before any collective.
  comm::FailingCommunicator comm("text.tp0", 0, 3);
  auto m = CreateTextTpModel(c, ModuleTensorSource(*ref), comm);
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("text.tp0"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("num_heads 4"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace dhp::tp
