// The rank's asynchronous checkpoint path on a real DistTrainer (tiny preset, a world of one
// rank over real Gloo, synthetic batches): a snapshot taken after step 1 and written by the
// CheckpointWriter only after step 2 has run holds step 1's state, byte for byte, while the same
// write from the live tensors (no snapshot) would hold step 2's.
#include "worker/model/param_init.h"
#include "worker/rank/rank_checkpoint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "common/layout.h"
#include "common/model_presets.h"
#include "worker/ckpt/tensor_shard.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"
#include "worker/comm/rank_threads.h"
#include "worker/model/layers.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/rank/checkpoint_writer.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp {
namespace {

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

std::string Root() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/rank_checkpoint_test";
}

// A writer task that holds the writer's thread until Open() (the disk is slow).
class Blocker {
 public:
  CheckpointTask Task() {
    CheckpointTask t;
    t.step = 0;
    t.write = [this]() -> absl::StatusOr<v1::ReportCheckpointRequest> {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return open_; })) {
        return absl::DeadlineExceededError("never opened");
      }
      return v1::ReportCheckpointRequest();
    };
    return t;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Writes step 1's checkpoint of `trainer` from `state` through a writer that is held up until
// step 2 has run; returns the tensors read back from the file.
NamedTensors WriteDuringTheNextStep(DistTrainer& trainer, NamedTensors state,
                                    const std::vector<PackedBatch>& batches,
                                    const std::string& dir) {
  std::map<int64_t, v1::ReportCheckpointRequest> reports;  // the writer's thread only
  Blocker blocker;
  NamedTensors out;
  {
    CheckpointWriter writer(
        [&](const v1::ReportCheckpointRequest& r) {
          reports[r.step()] = r;
          return absl::OkStatus();
        },
        CheckpointWriterOptions{});
    EXPECT_TRUE(writer.Submit(blocker.Task()).ok());
    const RankCheckpointTarget target{"j", 1, 1, 0, dir};
    EXPECT_TRUE(writer.Submit(MakeRankCheckpointTask(target, 1, std::move(state), {{"k", "v"}}))
                    .ok());
    absl::StatusOr<DistStepResult> step2 = trainer.Step(batches);  // while the write waits
    EXPECT_TRUE(step2.ok()) << step2.status();
    EXPECT_EQ(writer.in_flight(), 2);
    blocker.Open();
    const absl::Status drained = writer.Drain();
    EXPECT_TRUE(drained.ok()) << drained;
  }
  const v1::ReportCheckpointRequest& r = reports.at(1);
  EXPECT_EQ(r.path(), CheckpointStepDir(dir, 1));
  EXPECT_EQ(r.path(), dir + "/step-00000001");
  EXPECT_EQ(r.shard().file(), "rank-00000.safetensors");
  EXPECT_EQ(r.world_size(), 1);
  absl::StatusOr<ckpt::LoadedShard> read = ckpt::ReadTensorShard(
      r.path(), {r.shard().file(), r.shard().size_bytes(), r.shard().crc32c()});
  EXPECT_TRUE(read.ok()) << read.status();
  if (read.ok()) {
    EXPECT_EQ(read->metadata.at("k"), "v");
    out = std::move(read->tensors);
  }
  return out;
}

// Whether every tensor of `got` (sorted by name) equals `want`'s of the same name, bitwise.
bool SameState(const NamedTensors& got, const NamedTensors& want) {
  std::map<std::string, at::Tensor> w(want.begin(), want.end());
  if (got.size() != w.size()) return false;
  for (const auto& [name, t] : got) {
    auto it = w.find(name);
    if (it == w.end() || !at::equal(t, it->second.cpu())) return false;
  }
  return true;
}

TEST(RankCheckpointTest, ASnapshotWrittenAfterTheNextStepHoldsTheStateOfItsOwnStep) {
  at::manual_seed(3);
  Qwen2_5_VL model(Tiny());
  InitQwenWeights(*model);
  const int64_t merge = Tiny().vision.spatial_merge_size;
  const std::vector<PackedBatch> batches = {
      MakeSyntheticBatch(Tiny(), {{1, 2 * merge, 3 * merge}, {1, 2 * merge, 2 * merge}}, 1)};
  comm::InMemoryKvClient kv;
  comm::Layout layout;  // one rank hosting both stages
  comm::RunRanks(1, [&](int rank) {
    comm::ProcessGroupsOptions po;
    po.arrival_timeout = po.store_timeout = po.collective_timeout = std::chrono::seconds(60);
    absl::StatusOr<std::unique_ptr<comm::ProcessGroups>> groups =
        comm::ProcessGroups::Create(kv, layout, rank, po);
    ASSERT_TRUE(groups.ok()) << groups.status();
    DistTrainerOptions o;
    o.schedule.max_steps = 10;
    absl::StatusOr<std::unique_ptr<DistTrainer>> trainer =
        DistTrainer::Create(Tiny(), model, **groups, nullptr, o);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    DistTrainer& t = **trainer;
    ASSERT_TRUE(t.Step(batches).ok());

    // Step 1's state (copies), and a snapshot of the live tensors: the same values, own storage.
    absl::StatusOr<NamedTensors> step1 = t.State();
    ASSERT_TRUE(step1.ok()) << step1.status();
    absl::StatusOr<NamedTensors> live = t.LiveState();
    ASSERT_TRUE(live.ok()) << live.status();
    absl::StatusOr<NamedTensors> snapshot = SnapshotToHost(*live);
    ASSERT_TRUE(snapshot.ok()) << snapshot.status();
    ASSERT_EQ(snapshot->size(), live->size());
    EXPECT_TRUE(SameState(*snapshot, *step1));
    for (size_t i = 0; i < live->size(); ++i) {
      const at::Tensor& a = (*live)[i].second;
      const at::Tensor& b = (*snapshot)[i].second;
      EXPECT_EQ((*live)[i].first, (*snapshot)[i].first);
      EXPECT_FALSE(b.is_cuda());
      EXPECT_TRUE(b.is_contiguous());
      if (a.numel() > 0) EXPECT_NE(a.data_ptr(), b.data_ptr()) << (*live)[i].first;
    }
    EXPECT_EQ(TensorBytes(*snapshot), TensorBytes(*step1));
    EXPECT_GT(TensorBytes(*snapshot), 100000);

    // Written while step 2 runs: step 1's state on disk.
    const NamedTensors written =
        WriteDuringTheNextStep(t, *std::move(snapshot), batches, Root() + "/snapshot");
    EXPECT_TRUE(SameState(written, *step1)) << "the shard does not hold step 1's state";

    // The same through the live tensors (no snapshot): step 3 changes them before the write,
    // which is what the snapshot is for.
    absl::StatusOr<NamedTensors> live2 = t.LiveState();
    ASSERT_TRUE(live2.ok());
    absl::StatusOr<NamedTensors> step2 = t.State();
    ASSERT_TRUE(step2.ok());
    const NamedTensors aliased =
        WriteDuringTheNextStep(t, *std::move(live2), batches, Root() + "/aliases");
    EXPECT_FALSE(SameState(aliased, *step2)) << "step 3 did not change the live tensors";
  });
}

}  // namespace
}  // namespace dhp
