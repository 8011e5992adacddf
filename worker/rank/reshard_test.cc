// Resuming under another layout (reshard.h), ranks as threads over real Gloo, tiny model, fp32:
// a run trained 3 steps on layout X writes its ranks' State() as a checkpoint (shards with the
// metadata dhp-rank writes, and the controller's record); ranks of layout Y load it resharded
// and train steps 4-6. Asserted:
//   - the parameters re-assemble identically: Y's FullParameters() right after loading equal X's
//     at the checkpoint, bit for bit;
//   - the optimizer state moves exactly: X -> Y -> X gives every X rank its State() back, bit
//     for bit (resharding only copies);
//   - steps 4-6 on Y have the losses and norms of X going on, and of Y trained from step 1
//     (1e-5 relative: layouts sum in different orders);
//   - what cannot be resharded is refused by name.
#include "worker/rank/reshard.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_layout.h"
#include "common/layout.h"
#include "common/model_presets.h"
#include "common/proto_yaml.h"
#include "common/spec_validate.h"
#include "worker/ckpt/rank_state_format.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/rank_threads.h"
#include "worker/model/param_init.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/dist_test_util.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp {
namespace {

constexpr int kSteps = 6;
constexpr int kSaveAt = 3;

struct LayoutCase {
  int sv, tt, dp;
  bool separate = false;
  bool vision_tp = false;
};

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

v1::JobSpec SpecOf(const LayoutCase& c) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      absl::StrFormat(R"(name: reshard-test
model: {preset: tiny}
vision: {parallelism: %s, degree: %d, dtype: fp32}
text: {parallelism: tensor, degree: %d, dtype: fp32}
data_parallel_size: %d
placement: %s
training: {batch_size: 2, max_steps: %d}
data:
  datasets: [shapes]
  registry: {shapes: {annotation_path: shapes/train.jsonl, image_root: shapes}}
)",
                      c.vision_tp ? "tensor" : "sequence", c.sv, c.tt, c.dp,
                      c.separate ? "separate" : "collocate", kSteps),
      {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec{};
}

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/reshard_test/", name);
}

// Step s's global batch: two packed samples; replica r of dp 2 takes sample r, dp 1 both as
// micro-batches (the same loss: sums over the global token count).
std::vector<std::vector<std::vector<PackedBatch>>> Batches(int dp) {
  std::vector<std::vector<std::vector<PackedBatch>>> steps;
  for (int s = 0; s < kSteps; ++s) {
    absl::StatusOr<PackedBatch> a =
        MakePositionedSyntheticBatch(Tiny(), {{1, 4, 6}, {1, 8, 4}}, 100 + s);
    absl::StatusOr<PackedBatch> b = MakePositionedSyntheticBatch(Tiny(), {{1, 6, 8}}, 200 + s);
    EXPECT_TRUE(a.ok() && b.ok());
    if (dp == 1) {
      steps.push_back({{*a, *b}});
    } else {
      steps.push_back({{*a}, {*b}});
    }
  }
  return steps;
}

DistTrainerOptions Options() {
  DistTrainerOptions o;
  o.optimizer.weight_decay = 0.1;
  o.schedule.peak = 2e-3;
  o.schedule.warmup_steps = 0;
  o.schedule.max_steps = kSteps;
  return o;
}

struct RunResult {
  std::map<int, double> losses, norms;                  // by step
  std::map<std::string, at::Tensor> loaded;             // full parameters after loading
  std::map<std::string, at::Tensor> saved_full;         // full parameters at save_at
  std::map<int, std::map<std::string, at::Tensor>> state_after_load, saved_state;  // by rank
  v1::Checkpoint record;                                // of the checkpoint written at save_at
  std::string error;                                    // the first failure of a load
};

// Trains `c` from step 1 (or from `resume`, resharded) to `last`; after step `save_at` writes
// every rank's State() under `dir` as a checkpoint.
RunResult Train(const LayoutCase& c, const v1::Checkpoint* resume, int last, int save_at,
              const std::string& dir) {
  at::set_num_threads(1);
  const v1::JobSpec spec = SpecOf(c);
  const comm::Layout layout = LayoutForSpec(spec);
  const int world = layout.WorldSize();
  const auto batches = Batches(c.dp);
  std::vector<Qwen2_5_VL> models;  // on this thread: the global RNG
  for (int r = 0; r < world; ++r) {
    at::manual_seed(7);
    models.emplace_back(Tiny());
    InitQwenWeights(*models.back(), 0.05);
  }
  RunResult out;
  out.record.set_id(1);
  out.record.set_job_id("j-reshard");
  out.record.set_step(save_at);
  out.record.set_world_size(world);
  out.record.set_path(dir);
  out.record.set_state(v1::CHECKPOINT_STATE_COMPLETE);
  std::mutex mu;
  comm::InMemoryKvClient kv;
  comm::RunRanks(world, [&](int rank) {
    absl::StatusOr<RankComms> comms = MakeRankComms(kv, layout, rank, TestGroupOptions());
    ASSERT_TRUE(comms.ok()) << comms.status();
    absl::StatusOr<std::unique_ptr<DistTrainer>> trainer = DistTrainer::Create(
        Tiny(), models[rank], *comms->groups, comms->handoff.get(), Options());
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    DistTrainer& t = **trainer;
    if (resume != nullptr) {
      const int64_t flat = t.vision_optimizer() ? t.vision_optimizer()->full_numel() : 0;
      absl::StatusOr<std::unique_ptr<ReshardedState>> r =
          ReshardedState::Open(*resume, Tiny(), layout, rank, flat);
      absl::StatusOr<DistTrainer::NamedTensors> live = t.LiveState();
      ASSERT_TRUE(live.ok()) << live.status();
      absl::StatusOr<DistTrainer::NamedTensors> state =
          r.ok() ? (*r)->State(*live) : absl::StatusOr<DistTrainer::NamedTensors>(r.status());
      if (state.ok()) {
        ASSERT_EQ((*r)->meta().step, resume->step());
        absl::Status loaded = t.LoadState(*state);
        ASSERT_TRUE(loaded.ok()) << loaded;
      } else {
        std::lock_guard<std::mutex> lock(mu);
        out.error = std::string(state.status().message());
        return;  // every rank fails alike: none goes on to a collective
      }
      absl::StatusOr<DistTrainer::NamedTensors> full = t.FullParameters();
      absl::StatusOr<DistTrainer::NamedTensors> after = t.State();
      ASSERT_TRUE(full.ok() && after.ok());
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& [name, v] : *full) out.loaded.emplace(name, v);
      for (const auto& [name, v] : *after) out.state_after_load[rank].emplace(name, v);
    }
    for (int64_t s = t.steps_done() + 1; s <= last; ++s) {
      absl::StatusOr<DistStepResult> step = t.Step(batches[s - 1]);
      ASSERT_TRUE(step.ok()) << step.status();
      std::lock_guard<std::mutex> lock(mu);
      if (comms->groups->text_coord().has_value()) out.losses[s] = step->loss;
      out.norms[s] = step->grad_norm;
    }
    if (save_at != last) return;
    absl::StatusOr<DistTrainer::NamedTensors> full = t.FullParameters();
    absl::StatusOr<DistTrainer::NamedTensors> state = t.State();
    ASSERT_TRUE(full.ok() && state.ok());
    ckpt::RankStateMeta meta;
    meta.job_id = "j-reshard";
    meta.attempt = 1;
    meta.step = save_at;
    meta.world_size = world;
    meta.world_rank = rank;
    meta.layout = layout.DebugString();
    meta.data_offset = 2 * save_at;
    meta.spec_json = ProtoToJson(spec);
    absl::StatusOr<v1::CheckpointShard> shard = WriteRankStateShard(dir, meta, *state);
    ASSERT_TRUE(shard.ok()) << shard.status();
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [name, v] : *full) out.saved_full.emplace(name, v);
    for (const auto& [name, v] : *state) out.saved_state[rank].emplace(name, v);
    *out.record.add_shards() = *shard;
  });
  return out;
}

void ExpectEqualTensors(const std::map<std::string, at::Tensor>& got,
                        const std::map<std::string, at::Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": " << name;
    EXPECT_TRUE(it->second.sizes() == w.sizes() && at::equal(it->second.cpu(), w.cpu()))
        << what << ": " << name;
  }
}

struct ReshardCase {
  std::string name;
  LayoutCase from, to;
};

class ReshardTest : public testing::TestWithParam<ReshardCase> {};

TEST_P(ReshardTest, TrainsOnAsIfNothingChanged) {
  const ReshardCase& c = GetParam();
  const RunResult x = Train(c.from, nullptr, kSteps, -1, "");                    // X throughout
  const RunResult x3 = Train(c.from, nullptr, kSaveAt, kSaveAt, Dir(c.name + "/x"));
  const RunResult y = Train(c.to, &x3.record, kSteps, kSaveAt, Dir(c.name + "/y"));
  ASSERT_EQ(y.error, "");
  ExpectEqualTensors(y.loaded, x3.saved_full, "full parameters after loading");
  const RunResult y_all = Train(c.to, nullptr, kSteps, -1, "");                  // Y throughout
  for (int s = kSaveAt + 1; s <= kSteps; ++s) {
    EXPECT_NEAR(y.losses.at(s), x.losses.at(s), 1e-5 * x.losses.at(s)) << "step " << s;
    EXPECT_NEAR(y.losses.at(s), y_all.losses.at(s), 1e-5 * y_all.losses.at(s)) << "step " << s;
    EXPECT_NEAR(y.norms.at(s), x.norms.at(s), 1e-5 * x.norms.at(s)) << "step " << s;
  }
  // Y's state right after loading, written as a checkpoint and resharded back into X, is X's.
  const RunResult y_ckpt = Train(c.to, &x3.record, kSaveAt, kSaveAt, Dir(c.name + "/y3"));
  ASSERT_EQ(y_ckpt.error, "");
  const RunResult back = Train(c.from, &y_ckpt.record, kSaveAt, -1, "");
  ASSERT_EQ(back.error, "");
  ASSERT_EQ(back.state_after_load.size(), x3.saved_state.size());
  for (const auto& [rank, state] : x3.saved_state) {
    ExpectEqualTensors(back.state_after_load.at(rank), state,
                       absl::StrCat("rank ", rank, " after X -> Y -> X"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ReshardTest,
    testing::Values(ReshardCase{"sp4_tp4_to_sp2_tp2", {4, 4, 1}, {2, 2, 1}},
                    ReshardCase{"dp2_to_dp1", {2, 2, 2}, {2, 2, 1}},
                    ReshardCase{"collocated_to_separate", {2, 2, 1}, {2, 2, 1, true}},
                    ReshardCase{"sp1_tp1_to_sp2_tp4_dp2", {1, 1, 1}, {2, 4, 2}},
                    ReshardCase{"vtp2_dp2_to_vtp2_tp1_separate", {2, 2, 2, false, true},
                                {2, 1, 1, true, true}}),
    [](const testing::TestParamInfo<ReshardCase>& info) { return info.param.name; });

TEST(ReshardRefusalTest, VisionTensorParallelismCannotChange) {
  const RunResult x3 = Train({2, 2, 1, false, true}, nullptr, kSaveAt, kSaveAt, Dir("refused/x"));
  const RunResult sp = Train({2, 2, 1}, &x3.record, kSaveAt, -1, "");
  EXPECT_NE(sp.error.find("cannot resume under \"vision 2 (sp) x text 2 x dp 1, collocated\""),
            std::string::npos)
      << sp.error;
  EXPECT_NE(sp.error.find("vision tensor-parallel baseline"), std::string::npos) << sp.error;
  const RunResult vtp4 = Train({4, 2, 1, false, true}, &x3.record, kSaveAt, -1, "");
  EXPECT_NE(vtp4.error.find("vision degree and strategy must stay"), std::string::npos)
      << vtp4.error;
}

TEST(ReshardRefusalTest, CorruptShardIsNamed) {
  RunResult x3 = Train({2, 2, 1}, nullptr, kSaveAt, kSaveAt, Dir("corrupt/x"));
  v1::Checkpoint record = x3.record;
  for (v1::CheckpointShard& s : *record.mutable_shards()) {
    if (s.rank() == 1) s.set_crc32c(s.crc32c() == "00000000" ? "00000001" : "00000000");
  }
  const RunResult y = Train({1, 1, 1}, &record, kSaveAt, -1, "");
  EXPECT_NE(y.error.find("rank-00001.safetensors: checksum mismatch"), std::string::npos)
      << y.error;
}

}  // namespace
}  // namespace dhp
