// RunJobRank end to end on REAL data: a generated shapes dataset, the tiny preset under vision
// SP 2 x text TP 2 collocated (2 ranks as threads over real Gloo, one in-memory KV per run), a
// fake controller per rank. Run A trains 4 steps straight (checkpoints at 2 and 4); run B is
// stopped by the controller after the checkpoint of step 2; run C resumes from B's checkpoint
// and trains steps 3-4: its losses and its final state are bit-identical to A's. Corrupt and
// foreign checkpoints are refused.
#include "worker/rank/job_rank.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/proto_yaml.h"
#include "common/spec_validate.h"
#include "worker/ckpt/checkpoint_shards.h"
#include "worker/ckpt/rank_state_format.h"
#include "worker/ckpt/shard_file.h"
#include "worker/ckpt/tensor_shard.h"
#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/rank_threads.h"
#include "worker/data/shapes_generator.h"

namespace dhp {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr int kWorld = 2;
constexpr int64_t kSteps = 4;

std::string Root() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/job_rank_test";
}

// The controller as one rank sees it; records everything. ReportCheckpoint runs on the rank's
// checkpoint writer thread: `mu` guards what it shares with the training thread.
class FakeControl : public RankControl {
 public:
  void StepStarted(int64_t step) override { started.push_back(step); }
  void StepFinished(const RankStepProgress& p) override {
    std::lock_guard<std::mutex> lock(mu);
    progress.push_back(p);
    finished.notify_all();
  }
  bool stop_requested() const override {
    std::lock_guard<std::mutex> lock(mu);
    return stop_after_checkpoint > 0 && !checkpoints.empty() &&
           checkpoints.back().step() >= stop_after_checkpoint;
  }
  bool preempt_requested() const override {
    return preempt_after_step > 0 && !progress.empty() && progress.back().step >= preempt_after_step;
  }
  int64_t checkpoint_requested_at() const override {
    return ask_checkpoint_at >= 0 && !progress.empty() && progress.back().step >= ask_checkpoint_at
               ? ask_checkpoint_at
               : -1;
  }
  void Flush(std::chrono::milliseconds) override { ++flushes; }
  absl::Status ReportCheckpoint(const v1::ReportCheckpointRequest& r) override {
    std::unique_lock<std::mutex> lock(mu);
    if (down_until_step > 0) {  // the controller is down (the call hangs) until that step ends
      finished.wait_for(lock, std::chrono::seconds(20), [&] {
        return !progress.empty() && progress.back().step >= down_until_step;
      });
    }
    steps_done_at_report.push_back(progress.empty() ? 0 : progress.back().step);
    ++report_calls;
    if (unavailable_reports > 0) {
      --unavailable_reports;
      return absl::UnavailableError("controller restarting");
    }
    checkpoints.push_back(r);
    return absl::OkStatus();
  }
  absl::Status RejectCheckpoint(const v1::RejectCheckpointRequest& r) override {
    rejects.push_back(r);
    return absl::OkStatus();
  }

  int64_t stop_after_checkpoint = 0;  // > 0: ask to stop once this step's checkpoint is reported
  int unavailable_reports = 0;        // the first N ReportCheckpoint calls fail UNAVAILABLE
  int64_t preempt_after_step = 0;  // > 0: SIGTERM arrives once this step finished
  int64_t ask_checkpoint_at = -1;  // >= 0: once this step finished, a checkpoint at it is asked
  int64_t down_until_step = 0;  // > 0: ReportCheckpoint hangs until this step finished (20 s)
  mutable std::mutex mu;
  std::condition_variable finished;  // a step finished
  std::vector<int64_t> steps_done_at_report;  // per ReportCheckpoint call
  std::vector<int64_t> started;
  std::vector<RankStepProgress> progress;
  std::vector<v1::ReportCheckpointRequest> checkpoints;
  std::vector<v1::RejectCheckpointRequest> rejects;
  int report_calls = 0;
  int flushes = 0;
};

struct RankRun {
  FakeControl control;
  absl::StatusOr<JobRankResult> result = absl::UnknownError("not run");
  std::vector<std::string> out;  // step lines
  std::vector<std::string> log;
};

struct JobRun {
  std::vector<RankRun> ranks = std::vector<RankRun>(kWorld);
  double Loss(int rank, int64_t step) const {
    for (const RankStepProgress& p : ranks[rank].control.progress) {
      if (p.step == step) return p.loss;
    }
    ADD_FAILURE() << "rank " << rank << " reported no step " << step;
    return NAN;
  }
  const v1::ReportCheckpointRequest* Checkpoint(int rank, int64_t step) const {
    for (const auto& c : ranks[rank].control.checkpoints) {
      if (c.step() == step) return &c;
    }
    return nullptr;
  }
};

class JobRankTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data::ShapesDatasetOptions o;
    o.out_dir = Root() + "/data/shapes";
    o.count = 24;
    o.size = 56;
    o.seed = 11;
    const absl::Status s = data::WriteShapesDataset(o);
    ASSERT_TRUE(s.ok()) << s;
  }

  static v1::JobSpec Spec() {
    std::ifstream in("configs/tiny-cpu.yaml");
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text.str(), {});
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec->mutable_training()->set_max_steps(kSteps);
    spec->mutable_training()->set_warmup_steps(0);
    spec->mutable_checkpoint()->set_every_steps(2);
    return *spec;
  }

  static JobDescription Describe(const std::string& checkpoint_dir) {
    JobDescription d;
    d.spec = Spec();
    d.run.set_job_id("j-test");
    d.run.set_attempt(1);
    d.run.set_checkpoint_dir(checkpoint_dir);
    return d;
  }

  // Runs `ranks` (default: all) of the job as threads; `prepare` adjusts each rank's control.
  static JobRun RunJob(const JobDescription& job, const std::vector<int>& ranks = {0, 1},
                    const std::function<void(int, FakeControl&)>& prepare = nullptr,
                    int world_size = kWorld) {
    JobRun run;
    comm::InMemoryKvClient kv;
    for (int r : ranks) {
      if (prepare) prepare(r, run.ranks[r].control);
    }
    comm::RunRanks(static_cast<int>(ranks.size()), [&](int i) {
      const int rank = ranks[i];
      RankRun& rr = run.ranks[rank];
      JobRankOptions o;
      o.job_id = "j-test";
      o.attempt = 1;
      o.world_rank = rank;
      o.world_size = world_size;
      o.data_root = Root();
      o.peak_tflops = 0.01 * (rank + 1);  // different per rank: MFU scales with 1 / peak
      o.timeout = std::chrono::seconds(60);
      o.out = [&rr](const std::string& line) { rr.out.push_back(line); };
      o.log = [&rr](const std::string& line) { rr.log.push_back(line); };
      o.sleep = [](std::chrono::milliseconds) {};
      rr.result = RunJobRank(job, o, kv, rr.control);
    });
    return run;
  }

  // Run A: 4 steps straight; rank 0's first checkpoint report meets an unavailable controller.
  static const JobRun& Straight() {
    static const JobRun* run = new JobRun(RunJob(Describe(Root() + "/A"), {0, 1}, [](int r, FakeControl& c) {
      if (r == 0) c.unavailable_reports = 2;
    }));
    return *run;
  }

  // Run B: rank 1's controller asks to stop once the step-2 checkpoint is reported. Written
  // synchronously (checkpoint.async_write false), so that the report, and with it the stop,
  // comes at a known step; A's (asynchronous) shards must equal B's byte for byte.
  static const JobRun& Stopped() {
    static const JobRun* run = new JobRun(RunJob(Synchronous(Describe(Root() + "/B")), {0, 1},
                                                 [](int r, FakeControl& c) {
                                                   if (r == 1) c.stop_after_checkpoint = 2;
                                                 }));
    return *run;
  }

  static JobDescription Synchronous(JobDescription d) {
    d.spec.mutable_checkpoint()->set_async_write(false);
    return d;
  }

  // The checkpoint record the controller would hold for run B's step-2 checkpoint.
  static v1::Checkpoint StoppedCheckpoint(const std::string& path) {
    v1::Checkpoint c;
    c.set_id(7);
    c.set_job_id("j-test");
    c.set_step(2);
    c.set_path(path);
    c.set_world_size(kWorld);
    for (int r = 0; r < kWorld; ++r) {
      const v1::ReportCheckpointRequest* req = Stopped().Checkpoint(r, 2);
      EXPECT_NE(req, nullptr);
      if (req != nullptr) *c.add_shards() = req->shard();
    }
    return c;
  }

  static JobDescription Resuming(const std::string& checkpoint_dir, const v1::Checkpoint& c) {
    JobDescription d = Describe(checkpoint_dir);
    d.run.set_start_step(c.step());
    d.run.set_resume_checkpoint_id(c.id());
    d.resume = c;
    return d;
  }
};

TEST_F(JobRankTest, TrainsEveryStepPrintsOneLineEachAndReportsCheckpoints) {
  const JobRun& a = Straight();
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = a.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
    EXPECT_EQ(rr.result->end, JobRankEnd::kFinished);
    EXPECT_EQ(ExitCodeOf(rr.result->end), 0);
    EXPECT_EQ(rr.result->last_step, kSteps);
    EXPECT_EQ(rr.control.started, (std::vector<int64_t>{1, 2, 3, 4}));
    ASSERT_EQ(rr.out.size(), 4u);
    EXPECT_THAT(rr.out[0], MatchesRegex("step 1/4 loss [0-9.e+-]+ lr [0-9.e+-]+ grad_norm "
                                        "[0-9.e+-]+ tokens_per_s [0-9.e+-]+ step_s [0-9.e+-]+"));
    for (const RankStepProgress& p : rr.control.progress) {
      EXPECT_EQ(p.total_steps, kSteps);
      EXPECT_TRUE(std::isfinite(p.loss));  // both ranks host a text role
      EXPECT_GT(p.tokens_per_second, 0);
      EXPECT_GT(p.metrics.at("image_tokens"), 0);  // real images went through the vision stage
      EXPECT_EQ(p.metrics.at("samples"), 4);
      // Every rank computes the same global loss.
      EXPECT_EQ(p.loss, a.Loss(0, p.step));
      // MFU of both stages (both ranks host both). Each rank does the same share of the same
      // step's FLOPs, so MFU x step time x peak agrees across ranks whatever their peaks.
      const double mfu_v = p.metrics.at("mfu_vision"), mfu_t = p.metrics.at("mfu_text");
      EXPECT_GT(mfu_v, 0);
      EXPECT_GT(mfu_t, 0);
      const RankStepProgress& q = a.ranks[1 - r].control.progress.at(p.step - 1);
      const double peak = 0.01e12 * (r + 1), other_peak = 0.01e12 * (2 - r);
      const double text_flops = mfu_t * p.step_seconds * peak;
      const double vision_flops = mfu_v * p.step_seconds * peak;
      EXPECT_NEAR(text_flops, q.metrics.at("mfu_text") * q.step_seconds * other_peak,
                  1e-9 * text_flops);
      EXPECT_NEAR(vision_flops, q.metrics.at("mfu_vision") * q.step_seconds * other_peak,
                  1e-9 * vision_flops);
      EXPECT_EQ(p.metrics.count("memory_allocated_bytes"), 0u);  // CPU: the resident set only
      EXPECT_GT(p.metrics.at("memory_rss_bytes"), 0);
    }
    EXPECT_THAT(rr.log, Contains(HasSubstr("MFU against a peak of")));
    // Checkpoints at 2 and 4, retried through the unavailable controller on rank 0.
    ASSERT_EQ(rr.control.checkpoints.size(), 2u);
    EXPECT_EQ(rr.control.report_calls, r == 0 ? 4 : 2);
    for (const auto& c : rr.control.checkpoints) {
      EXPECT_EQ(c.job_id(), "j-test");
      EXPECT_EQ(c.world_size(), kWorld);
      EXPECT_EQ(c.path(), absl::StrFormat("%s/A/step-%08d", Root(), c.step()));
      EXPECT_EQ(c.shard().rank(), r);
      EXPECT_EQ(c.shard().file(), absl::StrFormat("rank-%05d.safetensors", r));
      EXPECT_GT(c.shard().size_bytes(), 0);
      EXPECT_EQ(c.shard().crc32c().size(), 8u);
      EXPECT_GE(c.write_seconds(), 0);
      const ckpt::ShardInfo info{c.shard().file(), c.shard().size_bytes(), c.shard().crc32c()};
      EXPECT_TRUE(ckpt::VerifyShard(c.path(), info).ok());
    }
  }
  EXPECT_LT(a.Loss(0, 4), a.Loss(0, 1));  // it learns
  for (const std::string& line : a.ranks[0].log) std::printf("%s\n", line.c_str());
  for (const std::string& line : a.ranks[0].out) std::printf("rank 0: %s\n", line.c_str());
}

// Every rank of `run` trained as `want` (run A, Straight): losses and norms to 1e-5 relative (fp32,
// summed in another order), the same global counters, and the same model FLOPs (MFU x time:
// same rank, same peak, the same number of ranks per stage).
void ExpectTrainsAs(const JobRun& run, const JobRun& want) {
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = run.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
    ASSERT_EQ(rr.control.progress.size(), static_cast<size_t>(kSteps));
    for (const RankStepProgress& p : rr.control.progress) {
      const RankStepProgress& q = want.ranks.at(r).control.progress.at(p.step - 1);
      EXPECT_NEAR(p.loss, q.loss, 1e-5 * q.loss) << "step " << p.step;
      EXPECT_NEAR(p.metrics.at("grad_norm"), q.metrics.at("grad_norm"),
                  1e-5 * q.metrics.at("grad_norm"));
      for (const char* count : {"samples", "tokens", "image_tokens", "loss_tokens"}) {
        EXPECT_EQ(p.metrics.at(count), q.metrics.at(count)) << count << " step " << p.step;
      }
      EXPECT_EQ(p.metrics.at("samples"), 4);
      EXPECT_DOUBLE_EQ(p.tokens_per_second, p.metrics.at("tokens") / p.step_seconds);
      for (const char* mfu : {"mfu_text", "mfu_vision"}) {
        const double flops = p.metrics.at(mfu) * p.step_seconds;
        EXPECT_NEAR(flops, q.metrics.at(mfu) * q.step_seconds, 1e-9 * flops) << mfu;
      }
    }
  }
}

// Gradient accumulation on real data: training.micro_batch_size 1 (four micro-batches of one
// sample per step) trains as run A's one packed sequence of four samples, and the step's tokens
// (tokens/s) and FLOPs (MFU) count every micro-batch.
TEST_F(JobRankTest, MicroBatchesTrainAsTheWholeBatchAndCountEveryToken) {
  JobDescription d = Describe(Root() + "/micro");
  d.spec.mutable_training()->set_micro_batch_size(1);
  ExpectTrainsAs(RunJob(d), Straight());
}

// Data parallelism on real data, each rank building only its replica's samples (issue 13 §5):
// two replicas of one vision and one text rank train as run A's one replica of two, and the
// step's counters and FLOPs, summed over the replicas, are the whole batch's.
TEST_F(JobRankTest, ReplicasLoadingOnlyTheirOwnSamplesTrainAsOneAndCountTheWholeBatch) {
  JobDescription d = Describe(Root() + "/dp2");
  d.spec.mutable_vision()->set_degree(1);
  d.spec.mutable_vision()->set_parallelism(v1::PARALLELISM_NONE);
  d.spec.mutable_vision()->set_zero_stage(1);
  d.spec.mutable_text()->set_degree(1);
  d.spec.mutable_text()->set_parallelism(v1::PARALLELISM_NONE);
  d.spec.set_data_parallel_size(2);
  d.spec.mutable_training()->set_micro_batch_size(2);  // each replica's whole share
  ExpectTrainsAs(RunJob(d), Straight());
}

TEST_F(JobRankTest, AStopEndsEveryRankAfterTheSameStep) {
  const JobRun& b = Stopped();
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = b.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
    EXPECT_EQ(rr.result->end, JobRankEnd::kStopped);  // rank 0 too: the ranks agree
    EXPECT_EQ(ExitCodeOf(rr.result->end), 0);
    // Rank 1 is told to stop by the answer to step 2's checkpoint report, which comes after
    // the ranks agreed at step 2's end: they agree on the stop at step 3's.
    EXPECT_EQ(rr.result->last_step, 3);
    EXPECT_EQ(rr.out.size(), 3u);
    ASSERT_EQ(rr.control.checkpoints.size(), 1u);  // step 2's; nothing at the stop
    EXPECT_GE(rr.control.flushes, 1);
    for (int64_t s = 1; s <= 3; ++s) EXPECT_EQ(b.Loss(r, s), Straight().Loss(r, s));
    // Synchronous: reported at step 2's boundary, before step 3 started.
    EXPECT_EQ(rr.control.steps_done_at_report, (std::vector<int64_t>{2}));
    EXPECT_THAT(rr.log, Contains(HasSubstr("checkpoint.async_write is off")));
    // The same state and data position as run A's (asynchronous) step-2 shard, tensor for
    // tensor; the metadata differ only in the spec's checkpoint.async_write.
    const v1::ReportCheckpointRequest& mine = rr.control.checkpoints[0];
    const v1::ReportCheckpointRequest& theirs = *Straight().Checkpoint(r, 2);
    absl::StatusOr<ckpt::LoadedShard> x = ckpt::ReadTensorShard(
        mine.path(), {mine.shard().file(), mine.shard().size_bytes(), mine.shard().crc32c()});
    absl::StatusOr<ckpt::LoadedShard> y = ckpt::ReadTensorShard(
        theirs.path(),
        {theirs.shard().file(), theirs.shard().size_bytes(), theirs.shard().crc32c()});
    ASSERT_TRUE(x.ok() && y.ok()) << x.status() << y.status();
    ASSERT_EQ(x->tensors.size(), y->tensors.size());
    for (size_t i = 0; i < x->tensors.size(); ++i) {
      EXPECT_EQ(x->tensors[i].first, y->tensors[i].first);
      EXPECT_TRUE(at::equal(x->tensors[i].second, y->tensors[i].second)) << x->tensors[i].first;
    }
    x->metadata.erase("dhp.spec");
    y->metadata.erase("dhp.spec");
    EXPECT_EQ(x->metadata, y->metadata);
  }
}

TEST_F(JobRankTest, AControllerThatHangsDoesNotHoldUpTrainingAndGetsEveryReportBeforeTheEnd) {
  // Both ranks' controllers hang on ReportCheckpoint until step 3 has finished: the step-2
  // checkpoint is written and reported in the background while steps 3 and 4 train.
  const JobRun run = RunJob(Describe(Root() + "/hang"), {0, 1}, [](int, FakeControl& c) {
    c.down_until_step = 3;
  });
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = run.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
    EXPECT_EQ(rr.result->end, JobRankEnd::kFinished);
    // Step 2's report reached the controller only after step 3 had finished; every report
    // reached it before the rank ended (the final one drained at the end).
    ASSERT_EQ(rr.control.steps_done_at_report.size(), 2u);
    EXPECT_GE(rr.control.steps_done_at_report[0], 3) << "training waited for the report";
    ASSERT_EQ(rr.control.checkpoints.size(), 2u);
    EXPECT_EQ(rr.control.checkpoints[0].step(), 2);
    EXPECT_EQ(rr.control.checkpoints[1].step(), 4);
    for (int64_t s = 1; s <= kSteps; ++s) EXPECT_EQ(run.Loss(r, s), Straight().Loss(r, s));
    // Snapshots, not the tensors that steps 3 and 4 changed: A's shards byte for byte.
    for (const v1::ReportCheckpointRequest& c : rr.control.checkpoints) {
      EXPECT_EQ(c.shard().crc32c(), Straight().Checkpoint(r, c.step())->shard().crc32c())
          << "rank " << r << " step " << c.step();
      EXPECT_EQ(c.shard().size_bytes(), Straight().Checkpoint(r, c.step())->shard().size_bytes());
    }
    EXPECT_THAT(rr.log, Contains(HasSubstr("checkpoint step 2: ")));
  }
}

TEST_F(JobRankTest, AControllerDownLongerThanTheTimeoutFailsNoRankAndGetsEveryReportOnceBack) {
  // 100 UNAVAILABLE answers in a row: backed off (by the no-op sleep) far past the 60 s
  // --timeout, which once bounded the retries of a report and failed the rank.
  const JobRun run = RunJob(Describe(Root() + "/outage"), {0, 1}, [](int, FakeControl& c) {
    c.unavailable_reports = 100;
  });
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = run.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
    EXPECT_EQ(rr.result->end, JobRankEnd::kFinished);
    EXPECT_EQ(rr.control.report_calls, 102);
    ASSERT_EQ(rr.control.checkpoints.size(), 2u);
    EXPECT_EQ(rr.control.checkpoints[0].step(), 2);
    EXPECT_EQ(rr.control.checkpoints[1].step(), 4);
    // Operators see why the checkpoint is late.
    EXPECT_THAT(rr.log, Contains(HasSubstr("checkpoint at step 2: ReportCheckpoint unanswered")));
  }
}

TEST_F(JobRankTest, ACheckpointNowAskedOfOneRankIsWrittenByEveryRankAtTheSameStep) {
  JobDescription job = Describe(Root() + "/C");
  job.spec.mutable_checkpoint()->set_every_steps(0);  // none but the last
  const JobRun c = RunJob(job, {0, 1}, [](int r, FakeControl& control) {
    if (r == 1) control.ask_checkpoint_at = 1;  // only rank 1's reporter heard it
  });
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = c.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
    EXPECT_EQ(rr.result->last_step, kSteps);
    std::vector<int64_t> steps;
    for (const v1::ReportCheckpointRequest& req : rr.control.checkpoints) steps.push_back(req.step());
    EXPECT_EQ(steps, (std::vector<int64_t>{1, kSteps})) << "rank " << r;  // once, then the last
    for (int64_t s = 1; s <= kSteps; ++s) EXPECT_EQ(c.Loss(r, s), Straight().Loss(r, s));
  }
  EXPECT_THAT(c.ranks[0].log, Contains(HasSubstr("checkpoint now at step 1")));
}

TEST_F(JobRankTest, ASigtermOnOneRankCheckpointsEveryRankAtTheSameStepAndEndsPreempted) {
  JobDescription job = Describe(Root() + "/D");
  job.spec.mutable_checkpoint()->set_every_steps(0);
  const JobRun d = RunJob(job, {0, 1}, [](int r, FakeControl& control) {
    if (r == 0) control.preempt_after_step = 3;  // step 3 of 4; one rank only
  });
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = d.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
    EXPECT_EQ(rr.result->end, JobRankEnd::kPreempted);
    EXPECT_EQ(ExitCodeOf(rr.result->end), 75);
    EXPECT_EQ(rr.result->last_step, 3);
    ASSERT_EQ(rr.control.checkpoints.size(), 1u);
    EXPECT_EQ(rr.control.checkpoints[0].step(), 3);
    EXPECT_GE(rr.control.flushes, 1);
    for (int64_t s = 1; s <= 3; ++s) EXPECT_EQ(d.Loss(r, s), Straight().Loss(r, s));
  }
  EXPECT_THAT(d.ranks[0].log, Contains(HasSubstr("preempted (SIGTERM or drain, here): checkpoint at step 3")));
  EXPECT_THAT(d.ranks[1].log,
              Contains(HasSubstr("preempted (SIGTERM or drain, on another rank): checkpoint at step 3")));
}

TEST_F(JobRankTest, AResumedRunContinuesBitIdentically) {
  const v1::Checkpoint c = StoppedCheckpoint(Root() + "/B/step-00000002");
  const JobRun resumed = RunJob(Resuming(Root() + "/C", c));
  const JobRun& a = Straight();
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = resumed.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
    EXPECT_EQ(rr.result->end, JobRankEnd::kFinished);
    EXPECT_EQ(rr.control.started, (std::vector<int64_t>{3, 4}));
    for (int64_t s = 3; s <= kSteps; ++s) {
      EXPECT_EQ(resumed.Loss(r, s), a.Loss(r, s)) << "rank " << r << " step " << s;  // bitwise
    }
    ASSERT_EQ(rr.out.size(), 2u);
    EXPECT_THAT(rr.out[0], HasSubstr("step 3/4 loss "));
    // The final state (parameters, ZeRO-1 partition, AdamW moments, step, data position) equals
    // run A's: tensor by tensor, and the whole file byte for byte.
    const v1::ReportCheckpointRequest* mine = resumed.Checkpoint(r, 4);
    const v1::ReportCheckpointRequest* theirs = a.Checkpoint(r, 4);
    ASSERT_TRUE(mine != nullptr && theirs != nullptr);
    absl::StatusOr<ckpt::LoadedShard> x = ckpt::ReadTensorShard(
        mine->path(), {mine->shard().file(), mine->shard().size_bytes(), mine->shard().crc32c()});
    absl::StatusOr<ckpt::LoadedShard> y = ckpt::ReadTensorShard(
        theirs->path(),
        {theirs->shard().file(), theirs->shard().size_bytes(), theirs->shard().crc32c()});
    ASSERT_TRUE(x.ok() && y.ok()) << x.status() << y.status();
    ASSERT_EQ(x->tensors.size(), y->tensors.size());
    int parameters = 0;
    for (size_t i = 0; i < x->tensors.size(); ++i) {
      EXPECT_EQ(x->tensors[i].first, y->tensors[i].first);
      EXPECT_TRUE(at::equal(x->tensors[i].second, y->tensors[i].second)) << x->tensors[i].first;
      parameters += x->tensors[i].first.rfind("optim.", 0) != 0;
    }
    EXPECT_GT(parameters, 10);
    EXPECT_EQ(x->metadata, y->metadata);
    EXPECT_EQ(mine->shard().crc32c(), theirs->shard().crc32c());
    // The normalised spec rides along in the metadata (what `dhp-ckpt export` reads).
    absl::StatusOr<ckpt::RankStateMeta> meta =
        ckpt::RankStateMeta::FromMetadata(x->metadata, mine->shard().file());
    ASSERT_TRUE(meta.ok()) << meta.status();
    EXPECT_EQ(meta->world_rank, r);
    EXPECT_EQ(meta->step, kSteps);
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(meta->spec_json, {});
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->DebugString(), Spec().DebugString());
  }
}

TEST_F(JobRankTest, ACorruptOrMissingShardIsRejectedBeforeJoining) {
  // Rank 1 alone (it never joins a group): its shard has a flipped bit.
  const std::string dir = Root() + "/corrupt";
  const v1::Checkpoint c = StoppedCheckpoint(dir);
  ASSERT_TRUE(ckpt::MakeDurableDirs(dir).ok());
  for (int r = 0; r < kWorld; ++r) {
    const std::string file = absl::StrFormat("rank-%05d.safetensors", r);
    std::ifstream in(Root() + "/B/step-00000002/" + file, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    std::string b = bytes.str();
    if (r == 1) b[b.size() - 100] ^= 0x04;
    if (r == 0) continue;  // rank 0's shard is missing
    std::ofstream(dir + "/" + file, std::ios::binary | std::ios::trunc) << b;
  }
  const JobRun run = RunJob(Resuming(Root() + "/D", c), {1, 0});
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = run.ranks[r];
    ASSERT_TRUE(rr.result.ok()) << rr.result.status();
    EXPECT_EQ(rr.result->end, JobRankEnd::kCheckpointRejected);
    EXPECT_EQ(ExitCodeOf(rr.result->end), 3);
    EXPECT_TRUE(rr.control.started.empty());
    ASSERT_EQ(rr.control.rejects.size(), 1u);
    const v1::RejectCheckpointRequest& rej = rr.control.rejects[0];
    EXPECT_EQ(rej.job_id(), "j-test");
    EXPECT_EQ(rej.attempt(), 1);
    EXPECT_EQ(rej.checkpoint_id(), 7);
    EXPECT_EQ(rej.rank(), r);
    EXPECT_THAT(rej.reason(), HasSubstr(absl::StrFormat("rank-%05d.safetensors", r)));
    EXPECT_THAT(rej.reason(), HasSubstr(r == 1 ? ": checksum mismatch: expected " : " is missing"));
  }
}

// Issue 15 §2 on real data: run B's step-2 checkpoint (vision SP 2 x text TP 2, collocated, two
// ranks) resumes resharded (reshard.h) on two data-parallel replicas of degree 1, and on one rank
// holding everything; both continue at step 3 from the checkpoint's data position and train
// steps 3-4 as run A (1e-5: fp32 summed in another order), with A's counters.
TEST_F(JobRankTest, AResumeOnAnotherLayoutReshardsAndTrainsOn) {
  const v1::Checkpoint c = StoppedCheckpoint(Root() + "/B/step-00000002");
  JobDescription dp2 = Resuming(Root() + "/G", c);
  dp2.spec.mutable_vision()->set_degree(1);
  dp2.spec.mutable_vision()->set_parallelism(v1::PARALLELISM_NONE);
  dp2.spec.mutable_text()->set_degree(1);
  dp2.spec.mutable_text()->set_parallelism(v1::PARALLELISM_NONE);
  dp2.spec.set_data_parallel_size(2);
  dp2.spec.mutable_training()->set_micro_batch_size(2);
  JobDescription one = dp2;
  one.run.set_checkpoint_dir(Root() + "/H");
  one.spec.set_data_parallel_size(1);
  one.spec.mutable_training()->clear_micro_batch_size();
  const JobRun& a = Straight();
  for (const auto& [job, ranks] :
       {std::pair{dp2, std::vector<int>{0, 1}}, std::pair{one, std::vector<int>{0}}}) {
    const JobRun run = RunJob(job, ranks, nullptr, static_cast<int>(ranks.size()));
    for (int r : ranks) {
      const RankRun& rr = run.ranks[r];
      ASSERT_TRUE(rr.result.ok()) << "rank " << r << ": " << rr.result.status();
      EXPECT_EQ(rr.result->end, JobRankEnd::kFinished);
      EXPECT_EQ(rr.control.started, (std::vector<int64_t>{3, 4}));
      EXPECT_TRUE(rr.control.rejects.empty());
      EXPECT_THAT(absl::StrJoin(rr.log, "\n"),
                  HasSubstr("resharded checkpoint 7 of layout vision 2 (sp) x text 2 x dp 1, "
                            "collocated into vision 1 (sp) x text 1 x dp "));
      ASSERT_EQ(rr.control.progress.size(), 2u);
      for (const RankStepProgress& p : rr.control.progress) {
        const RankStepProgress& q = a.ranks[0].control.progress.at(p.step - 1);
        EXPECT_NEAR(p.loss, q.loss, 1e-5 * q.loss) << "step " << p.step;
        EXPECT_NEAR(p.metrics.at("grad_norm"), q.metrics.at("grad_norm"),
                    1e-5 * q.metrics.at("grad_norm"));
        for (const char* count : {"samples", "tokens", "image_tokens", "loss_tokens"}) {
          EXPECT_EQ(p.metrics.at(count), q.metrics.at(count)) << count << " step " << p.step;
        }
      }
    }
  }
}

TEST_F(JobRankTest, ACheckpointOfAnotherLayoutOrAWrongWorldSizeFails) {
  // B's shards, re-written with another layout in their metadata (sizes and checksums fresh).
  const std::string dir = Root() + "/foreign";
  v1::Checkpoint c = StoppedCheckpoint(dir);
  c.clear_shards();
  for (int r = 0; r < kWorld; ++r) {
    const v1::ReportCheckpointRequest* req = Stopped().Checkpoint(r, 2);
    ASSERT_NE(req, nullptr);
    absl::StatusOr<ckpt::LoadedShard> s = ckpt::ReadTensorShard(
        req->path(), {req->shard().file(), req->shard().size_bytes(), req->shard().crc32c()});
    ASSERT_TRUE(s.ok()) << s.status();
    absl::StatusOr<ckpt::RankStateMeta> meta =
        ckpt::RankStateMeta::FromMetadata(s->metadata, req->shard().file());
    ASSERT_TRUE(meta.ok()) << meta.status();
    // Written by the vision TP baseline, whose ZeRO-1 state cannot be resharded for Ulysses.
    v1::JobSpec vision_tp = Spec();
    vision_tp.mutable_vision()->set_parallelism(v1::PARALLELISM_TENSOR);
    meta->spec_json = ProtoToJson(vision_tp);
    meta->layout = "vision 2 (tp) x text 2 x dp 1, collocated";
    absl::StatusOr<ckpt::WrittenShard> w =
        ckpt::WriteTensorShard(dir, req->shard().file(), s->tensors, meta->ToMetadata());
    ASSERT_TRUE(w.ok()) << w.status();
    *c.add_shards() = ckpt::ShardRecord(r, w->info);
  }
  const JobRun run = RunJob(Resuming(Root() + "/E", c));
  for (int r = 0; r < kWorld; ++r) {
    const RankRun& rr = run.ranks[r];
    ASSERT_FALSE(rr.result.ok());
    EXPECT_EQ(rr.result.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(rr.result.status().message()),
                HasSubstr(absl::StrFormat("rank %d: resuming from checkpoint 7 (", r)));
    EXPECT_THAT(std::string(rr.result.status().message()),
                HasSubstr("a checkpoint of layout \"vision 2 (tp) x text 2 x dp 1, collocated\" "
                          "cannot resume under \"vision 2 (sp) x text 2 x dp 1, collocated\""));
    EXPECT_TRUE(rr.control.rejects.empty());
  }

  const JobRun wrong = RunJob(Describe(Root() + "/F"), {0}, nullptr, /*world_size=*/3);
  ASSERT_FALSE(wrong.ranks[0].result.ok());
  EXPECT_THAT(std::string(wrong.ranks[0].result.status().message()),
              HasSubstr("rank 0: --world-size 3 does not match the job's layout (vision 2 (sp) x "
                        "text 2 x dp 1, collocated), which has 2 ranks"));
}

}  // namespace
}  // namespace dhp
