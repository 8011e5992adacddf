// DistTrainer::State / LoadState on synthetic batches, ranks as threads over real Gloo: the
// state names what a rank needs (parameters, ZeRO-1 partition, AdamW moments, step), loads back
// into the trainer that wrote it, and a state of another layout is refused with a message that
// names the layout and the tensors, changing nothing.
#include "worker/model/param_init.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/dist_test_util.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/model_presets.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"
#include "worker/comm/rank_threads.h"
#include "worker/model/layers.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp {
namespace {

using ::testing::HasSubstr;
using NamedTensors = DistTrainer::NamedTensors;

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

comm::Layout MakeLayout(int sv, int tt) {
  comm::Layout l;
  l.vision_degree = sv;
  l.text_degree = tt;
  return l;
}

std::set<std::string> Names(const NamedTensors& t) {
  std::set<std::string> out;
  for (const auto& [name, tensor] : t) out.insert(name);
  return out;
}

// Runs `fn(rank, trainer)` on every rank of `layout` after one training step.
void WithTrainers(const comm::Layout& layout,
                  const std::function<void(int, DistTrainer&)>& fn) {
  std::vector<Qwen2_5_VL> models;
  for (int r = 0; r < layout.WorldSize(); ++r) {
    at::manual_seed(3);
    models.emplace_back(Tiny());
    InitQwenWeights(*models.back());
  }
  const int64_t merge = Tiny().vision.spatial_merge_size;
  const std::vector<PackedBatch> batches = {
      MakeSyntheticBatch(Tiny(), {{1, 2 * merge, 3 * merge}, {1, 2 * merge, 2 * merge}}, 1)};
  comm::InMemoryKvClient kv;
  comm::RunRanks(layout.WorldSize(), [&](int rank) {
    comm::ProcessGroupsOptions po;
    po.arrival_timeout = po.store_timeout = po.collective_timeout = std::chrono::seconds(60);
    absl::StatusOr<RankComms> comms = MakeRankComms(kv, layout, rank, po);
    ASSERT_TRUE(comms.ok()) << comms.status();
    DistTrainerOptions o;
    o.optimizer.weight_decay = 0.1;
    o.schedule.max_steps = 10;
    absl::StatusOr<std::unique_ptr<DistTrainer>> t =
        DistTrainer::Create(Tiny(), models[rank], *comms->groups, comms->handoff.get(), o);
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<DistStepResult> step = (*t)->Step(batches);
    ASSERT_TRUE(step.ok()) << step.status();
    fn(rank, **t);
  });
}

TEST(DistStateTest, StateCoversEveryRoleAndLoadsBackIntoTheSameLayout) {
  WithTrainers(MakeLayout(2, 2), [](int rank, DistTrainer& t) {
    absl::StatusOr<NamedTensors> state = t.State();
    ASSERT_TRUE(state.ok()) << state.status();
    const std::set<std::string> names = Names(*state);
    for (const char* want :
         {"trainer.step", "visual.patch_embed.proj.weight", "optim.vision.master",
          "optim.vision.exp_avg", "optim.vision.exp_avg_sq", "optim.vision.step",
          "model.embed_tokens.weight", "lm_head.weight",
          "optim.text.model.embed_tokens.weight.exp_avg",
          "optim.text.model.embed_tokens.weight.exp_avg_sq",
          "optim.text.model.embed_tokens.weight.step"}) {
      EXPECT_EQ(names.count(want), 1u) << "rank " << rank << " lacks " << want;
    }
    for (const auto& [name, tensor] : *state) {
      if (name == "trainer.step") {
        EXPECT_EQ(tensor.item<int64_t>(), 1);
      }
      if (name == "model.embed_tokens.weight") {
        EXPECT_EQ(tensor.size(0), Tiny().text.vocab_size / 2) << "a TP shard, not the full table";
      }
    }
    const absl::Status loaded = t.LoadState(*state);
    EXPECT_TRUE(loaded.ok()) << loaded;
    EXPECT_EQ(t.steps_done(), 1);

    // Missing and unknown tensors are named; nothing changes.
    NamedTensors broken;
    for (const auto& nt : *state) {
      if (nt.first != "trainer.step") broken.push_back(nt);
    }
    broken.emplace_back("visual.not_a_parameter", at::zeros({1}));
    const absl::Status s = t.LoadState(broken);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("1 missing (trainer.step)"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("1 unexpected (visual.not_a_parameter)"));
  });
}

TEST(DistStateTest, AStateOfAnotherLayoutIsRefusedNamingTheLayoutAndTensors) {
  NamedTensors single;  // of the one-rank layout
  WithTrainers(MakeLayout(1, 1), [&](int, DistTrainer& t) {
    absl::StatusOr<NamedTensors> state = t.State();
    ASSERT_TRUE(state.ok()) << state.status();
    single = *state;
  });
  NamedTensors rank0;  // rank 0 of vision SP 2 x text TP 2
  WithTrainers(MakeLayout(2, 2), [&](int rank, DistTrainer& t) {
    absl::StatusOr<NamedTensors> before = t.State();
    ASSERT_TRUE(before.ok());
    if (rank == 0) rank0 = *before;
    const absl::Status s = t.LoadState(single);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    const std::string m(s.message());
    EXPECT_THAT(m, HasSubstr("does not fit world rank " + std::to_string(rank) +
                             " of layout vision 2 (sp) x text 2 x dp 1, collocated"));
    EXPECT_THAT(m, HasSubstr("of another shape"));
    EXPECT_THAT(m, HasSubstr("optim.vision.master: checkpoint ["));
    EXPECT_THAT(m, HasSubstr("another layout"));
    // Nothing was changed: the state is still this trainer's own.
    absl::StatusOr<NamedTensors> after = t.State();
    ASSERT_TRUE(after.ok());
    ASSERT_EQ(after->size(), before->size());
    for (size_t i = 0; i < after->size(); ++i) {
      EXPECT_TRUE(at::equal((*after)[i].second, (*before)[i].second)) << (*after)[i].first;
    }
  });
  WithTrainers(MakeLayout(1, 1), [&](int, DistTrainer& t) {
    const absl::Status s = t.LoadState(rank0);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("of layout vision 1 (sp) x text 1 x dp 1, collocated"));
    EXPECT_THAT(std::string(s.message()), HasSubstr("model.embed_tokens.weight: checkpoint [512, 64], "
                                                    "this rank [1024, 64]"));
  });
}

}  // namespace
}  // namespace dhp
