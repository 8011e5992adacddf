// Tests JobManager on an in-memory Store with a FakeClock: submit (text, structured, dry run,
// invalid), get, list (filters, pages), cancel, resume (from the newest checkpoint; on a new
// layout, refused when it cannot work), progress, and that every job transition is recorded as
// an event.
#include "controller/job_manager.h"

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "common/proto_enum.h"
#include "controller/job_state_machine.h"
#include "controller/store.h"
#include "controller/time_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::google::protobuf::util::MessageDifferencer;

constexpr char kRoot[] = "/data/checkpoints";

// A valid spec for the tiny model, with a name and a team label.
std::string SpecYaml(const std::string& name, const std::string& team = "vision") {
  return "name: " + name + "\nlabels: {team: " + team + "}\nmodel: {preset: tiny}\n" +
         "vision: {parallelism: sequence, degree: 2}\ntext: {parallelism: tensor, degree: 2}\n"
         "training: {max_steps: 100}\n"
         "data: {datasets: [shapes], registry: {shapes: {annotation_path: data/train.jsonl}}}\n";
}

// SpecYaml with 4 samples per step, in micro-batches of `micro` (0: unset, the whole share).
std::string BatchedSpecYaml(const std::string& name, int micro = 2) {
  std::string yaml = SpecYaml(name);
  const std::string from = "training: {max_steps: 100}";
  yaml.replace(yaml.find(from), from.size(),
               "training: {max_steps: 100, batch_size: 4" +
                   (micro > 0 ? ", micro_batch_size: " + std::to_string(micro) : "") + "}");
  return yaml;
}

// (type, from, to, reason, attempt) of an event, for comparing histories.
using EventRow = std::tuple<std::string, std::string, std::string, std::string, int>;
EventRow Row(const v1::Event& e) {
  return {e.type(), e.from_state(), e.to_state(), e.reason(), e.attempt()};
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    jobs_ = std::make_unique<JobManager>(*store_, clock_, SpecOptions{kRoot});
  }

  // Submits SpecYaml(name, team); returns the stored job.
  v1::Job Submit(const std::string& name, const std::string& team = "vision") {
    return SubmitText(SpecYaml(name, team));
  }
  v1::Job SubmitText(const std::string& yaml) {
    v1::SubmitJobRequest req;
    req.set_spec_text(yaml);
    v1::SubmitJobResponse resp;
    std::vector<v1::Event> events;
    absl::Status s = jobs_->Submit(req, &resp, &events);
    EXPECT_TRUE(s.ok()) << s;
    return resp.job();
  }

  absl::Status Cancel(const std::string& id, const std::string& reason = "",
                      v1::CancelJobResponse* resp = nullptr,
                      std::vector<v1::Event>* events = nullptr) {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    req.set_reason(reason);
    v1::CancelJobResponse r;
    std::vector<v1::Event> e;
    return jobs_->Cancel(req, resp ? resp : &r, events ? events : &e);
  }

  absl::Status Resume(const std::string& id, v1::ResumeJobResponse* resp,
                      std::vector<v1::Event>* events = nullptr) {
    v1::ResumeJobRequest req;
    req.set_job_id(id);
    std::vector<v1::Event> e;
    return jobs_->Resume(req, resp, events ? events : &e);
  }

  // Resumes with the layout fields of `req` (its job_id is set here); `admit` counts its calls
  // in admissions_ and answers admission_.
  absl::Status ResumeWith(const std::string& id, v1::ResumeJobRequest req,
                          v1::ResumeJobResponse* resp, std::vector<v1::Event>* events = nullptr) {
    req.set_job_id(id);
    std::vector<v1::Event> e;
    return jobs_->Resume(req, resp, events ? events : &e, [this](const v1::JobSpec& spec) {
      admitted_.push_back(spec);
      return admission_;
    });
  }

  // Everything the store holds about a job (the row, runs, checkpoints, events), serialised.
  std::vector<std::string> Snapshot(const std::string& id) {
    std::vector<std::string> out = {Stored(id).SerializeAsString()};
    for (const v1::Run& r : store_->ListRuns(id)) out.push_back(r.SerializeAsString());
    for (const v1::Checkpoint& c : store_->ListCheckpoints(id)) {
      out.push_back(c.SerializeAsString());
    }
    for (const v1::Event& e : store_->ListEvents(id, 0, 0)) out.push_back(e.SerializeAsString());
    return out;
  }

  // A COMPLETE checkpoint of attempt 1 at `step`, with `world_size` shards expected.
  v1::Checkpoint AddCompleteCheckpoint(const std::string& id, int64_t step, int world_size) {
    v1::Checkpoint ckpt;
    ckpt.set_job_id(id);
    ckpt.set_attempt(1);
    ckpt.set_state(v1::CHECKPOINT_STATE_COMPLETE);
    ckpt.set_step(step);
    ckpt.set_world_size(world_size);
    absl::StatusOr<v1::Checkpoint> added = store_->AddCheckpoint(ckpt, {});
    EXPECT_TRUE(added.ok()) << added.status();
    return added.ok() ? *added : v1::Checkpoint();
  }

  v1::Job Stored(const std::string& id) {
    absl::StatusOr<v1::Job> job = store_->GetJob(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }

  std::vector<EventRow> History(const std::string& id) {
    std::vector<EventRow> rows;
    for (const v1::Event& e : store_->ListEvents(id, 0, 0)) rows.push_back(Row(e));
    return rows;
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<JobManager> jobs_;
  absl::Status admission_;                // what the admission check of ResumeWith answers
  std::vector<v1::JobSpec> admitted_;     // the specs it was asked about
};

TEST_F(JobManagerTest, SubmitFromYamlStoresQueuedJobWithPendingRunAndOneEvent) {
  const int64_t now = clock_.NowMicros();
  v1::SubmitJobRequest req;
  req.set_spec_text(SpecYaml("demo"));
  v1::SubmitJobResponse resp;
  std::vector<v1::Event> events;
  ASSERT_TRUE(jobs_->Submit(req, &resp, &events).ok());

  const v1::Job& job = resp.job();
  EXPECT_EQ(job.id().rfind("j-", 0), 0u) << job.id();
  EXPECT_EQ(job.id().size(), 14u) << job.id();  // "j-" + 12 hex digits
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.current_attempt(), 1);
  EXPECT_EQ(job.message(), "submitted");
  EXPECT_EQ(TimestampToMicros(job.create_time()), now);
  EXPECT_EQ(TimestampToMicros(job.update_time()), now);
  absl::StatusOr<v1::JobSpec> expected = ParseJobSpec(SpecYaml("demo"), SpecOptions{kRoot});
  ASSERT_TRUE(expected.ok());
  EXPECT_TRUE(MessageDifferencer::Equals(job.spec(), *expected)) << job.spec().DebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()), job));

  std::vector<v1::Run> runs = store_->ListRuns(job.id());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].job_id(), job.id());
  EXPECT_EQ(runs[0].attempt(), 1);
  EXPECT_EQ(runs[0].state(), v1::RUN_STATE_PENDING);
  EXPECT_EQ(TimestampToMicros(runs[0].create_time()), now);

  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].id(), 1);
  EXPECT_EQ(events[0].job_id(), job.id());
  EXPECT_EQ(TimestampToMicros(events[0].time()), now);
  EXPECT_EQ(Row(events[0]), EventRow("job.state", "", "QUEUED", "submitted", 1));
  std::vector<v1::Event> stored = store_->ListEvents(job.id(), 0, 0);
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_TRUE(MessageDifferencer::Equals(stored[0], events[0]));
}

TEST_F(JobManagerTest, SubmitStructuredSpecIsNormalised) {
  v1::SubmitJobRequest req;
  v1::JobSpec& spec = *req.mutable_spec();
  spec.set_name("structured");
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_training()->set_max_steps(10);
  spec.mutable_data()->add_datasets("shapes");
  (*spec.mutable_data()->mutable_registry())["shapes"].set_annotation_path("a.jsonl");
  v1::SubmitJobResponse resp;
  std::vector<v1::Event> events;
  ASSERT_TRUE(jobs_->Submit(req, &resp, &events).ok());

  const v1::Job stored = Stored(resp.job().id());
  const v1::JobSpec& s = stored.spec();
  EXPECT_EQ(s.name(), "structured");
  EXPECT_EQ(s.vision().parallelism(), v1::PARALLELISM_NONE);
  EXPECT_EQ(s.vision().degree(), 1);
  EXPECT_EQ(s.vision().zero_stage(), 0);
  EXPECT_EQ(s.text().degree(), 1);
  EXPECT_EQ(s.placement(), v1::PLACEMENT_COLLOCATE);
  EXPECT_EQ(s.training().schedule(), v1::LR_SCHEDULE_COSINE);
  EXPECT_EQ(s.data().registry().at("shapes").weight(), 1.0);
  EXPECT_EQ(s.checkpoint().keep_latest(), 3);
  EXPECT_EQ(s.checkpoint().directory(), "structured");
  EXPECT_EQ(events.size(), 1u);
}

TEST_F(JobManagerTest, SpecAndSpecTextTogetherOrNeitherAreInvalid) {
  v1::SubmitJobRequest req;
  req.set_spec_text(SpecYaml("both"));
  req.mutable_spec()->set_name("both");
  v1::SubmitJobResponse resp;
  std::vector<v1::Event> events;
  absl::Status s = jobs_->Submit(req, &resp, &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "set either spec or spec_text, not both");

  s = jobs_->Submit(v1::SubmitJobRequest(), &resp, &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec: missing; send the job spec as spec or spec_text");
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(store_->LastEventId(), 0);
}

TEST_F(JobManagerTest, InvalidSpecIsRefusedWithTheValidationMessageAndNothingStored) {
  v1::SubmitJobRequest req;
  req.set_spec_text(
      "name: bad\nmodel: {preset: tiny}\nvision: {parallelism: sequence, degree: 3}\n"
      "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n");
  v1::SubmitJobResponse resp;
  std::vector<v1::Event> events;
  absl::Status s = jobs_->Submit(req, &resp, &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "vision.degree: 3 does not divide the 4 attention heads of the tiny vision encoder; "
            "training: set exactly one of max_steps and epochs; neither is set");

  req.set_spec_text(SpecYaml("typo") + "restart: {max_restart: 1}\n");
  s = jobs_->Submit(req, &resp, &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "restart.max_restart: unknown key; known keys: max_restarts, stall_timeout_s, "
            "launch_timeout_s, collective_timeout_s, preemption_grace_s");

  EXPECT_TRUE(events.empty());
  EXPECT_EQ(resp.job().id(), "");
  absl::StatusOr<JobPage> page = store_->ListJobs(JobQuery());
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->jobs.empty());
  EXPECT_TRUE(store_->ListEvents("", 0, 0).empty());
}

TEST_F(JobManagerTest, DryRunReturnsNormalisedSpecAndStoresNothing) {
  v1::SubmitJobRequest req;
  req.set_spec_text(SpecYaml("dry"));
  req.set_dry_run(true);
  v1::SubmitJobResponse resp;
  std::vector<v1::Event> events;
  ASSERT_TRUE(jobs_->Submit(req, &resp, &events).ok());
  EXPECT_EQ(resp.job().id(), "");
  EXPECT_EQ(resp.job().message(), "dry run: the spec is valid; nothing was stored");
  EXPECT_EQ(resp.job().spec().vision().zero_stage(), 1);  // the default with sequence
  EXPECT_EQ(resp.job().spec().training().learning_rate(), 1e-5);
  EXPECT_EQ(resp.job().spec().checkpoint().directory(), "dry");
  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(store_->ListJobs(JobQuery())->jobs.empty());
  EXPECT_EQ(store_->LastEventId(), 0);
}

TEST_F(JobManagerTest, GetReturnsJobRunsAndCheckpoints) {
  const v1::Job job = Submit("get");
  v1::Checkpoint ckpt;
  ckpt.set_job_id(job.id());
  ckpt.set_attempt(1);
  ckpt.set_step(50);
  ckpt.set_path("/data/checkpoints/get/step-50");
  ASSERT_TRUE(store_->AddCheckpoint(ckpt, {}).ok());

  v1::GetJobRequest req;
  req.set_job_id(job.id());
  v1::GetJobResponse resp;
  ASSERT_TRUE(jobs_->Get(req, &resp).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(resp.job(), job));
  ASSERT_EQ(resp.runs_size(), 1);
  EXPECT_EQ(resp.runs(0).state(), v1::RUN_STATE_PENDING);
  ASSERT_EQ(resp.checkpoints_size(), 1);
  EXPECT_EQ(resp.checkpoints(0).id(), 1);
  EXPECT_EQ(resp.checkpoints(0).step(), 50);
  EXPECT_EQ(resp.checkpoints(0).path(), "/data/checkpoints/get/step-50");

  req.set_job_id("j-missing");
  absl::Status s = jobs_->Get(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "job j-missing not found");
  req.set_job_id("");
  s = jobs_->Get(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "job_id: must not be empty");
}

TEST_F(JobManagerTest, ListFiltersByStateAndLabelsAndPagesWithoutDuplicates) {
  std::vector<std::string> ids;  // oldest first
  for (int i = 0; i < 7; ++i) {
    ids.push_back(Submit("job" + std::to_string(i), i % 2 == 0 ? "a" : "b").id());
    clock_.AdvanceMicros(1000);
  }
  ASSERT_TRUE(Cancel(ids[1]).ok());
  ASSERT_TRUE(Cancel(ids[4]).ok());

  // Three pages of 3, 3 and 1, newest first.
  std::vector<std::string> seen;
  v1::ListJobsRequest req;
  req.set_page_size(3);
  std::vector<int> sizes;
  for (int page = 0; page < 5; ++page) {
    v1::ListJobsResponse resp;
    ASSERT_TRUE(jobs_->List(req, &resp).ok());
    sizes.push_back(resp.jobs_size());
    for (const v1::Job& j : resp.jobs()) seen.push_back(j.id());
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(sizes, (std::vector<int>{3, 3, 1}));
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend()));
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 7u);

  v1::ListJobsRequest by_state;
  by_state.add_states(v1::JOB_STATE_CANCELLED);
  v1::ListJobsResponse resp;
  ASSERT_TRUE(jobs_->List(by_state, &resp).ok());
  ASSERT_EQ(resp.jobs_size(), 2);
  EXPECT_EQ(resp.jobs(0).id(), ids[4]);
  EXPECT_EQ(resp.jobs(1).id(), ids[1]);
  EXPECT_EQ(resp.next_page_token(), "");

  v1::ListJobsRequest both;
  both.add_states(v1::JOB_STATE_QUEUED);
  (*both.mutable_labels())["team"] = "a";
  resp.Clear();
  ASSERT_TRUE(jobs_->List(both, &resp).ok());
  std::vector<std::string> got;
  for (const v1::Job& j : resp.jobs()) got.push_back(j.id());
  EXPECT_EQ(got, (std::vector<std::string>{ids[6], ids[2], ids[0]}));  // ids[4] is cancelled

  (*both.mutable_labels())["team"] = "nobody";
  resp.Clear();
  ASSERT_TRUE(jobs_->List(both, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 0);
}

TEST_F(JobManagerTest, ListRefusesBadPageTokenPageSizeAndState) {
  v1::ListJobsResponse resp;
  for (const std::string token : {"bogus", "p", "p0", "p-3", "p12x"}) {
    v1::ListJobsRequest req;
    req.set_page_token(token);
    absl::Status s = jobs_->List(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << token;
    EXPECT_EQ(s.message(), "page_token: \"" + token + "\" is not a token returned by ListJobs");
  }
  for (int size : {-1, 1001}) {
    v1::ListJobsRequest req;
    req.set_page_size(size);
    absl::Status s = jobs_->List(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "page_size: " + std::to_string(size) +
                               " is out of range; use 1..1000 (0: default 50)");
  }
  v1::ListJobsRequest req;
  req.add_states(static_cast<v1::JobState>(42));
  absl::Status s = jobs_->List(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "states: 42 is not a job state; use one of queued, scheduled, starting, running, "
            "restarting, cancelling, cancelled, succeeded, failed");
}

TEST_F(JobManagerTest, CancelQueuedJobCancelsItAndItsRun) {
  const v1::Job job = Submit("cancel");
  clock_.AdvanceMicros(5'000'000);
  const int64_t now = clock_.NowMicros();
  v1::CancelJobResponse resp;
  std::vector<v1::Event> events;
  ASSERT_TRUE(Cancel(job.id(), "no longer needed", &resp, &events).ok());
  EXPECT_EQ(resp.job().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(resp.job().message(), "no longer needed");
  EXPECT_EQ(TimestampToMicros(resp.job().update_time()), now);
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()), resp.job()));

  std::vector<v1::Run> runs = store_->ListRuns(job.id());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].state(), v1::RUN_STATE_CANCELLED);
  EXPECT_EQ(runs[0].reason(), "no longer needed");
  EXPECT_EQ(TimestampToMicros(runs[0].end_time()), now);

  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].id(), 2);
  EXPECT_EQ(Row(events[0]), EventRow("job.state", "QUEUED", "CANCELLED", "no longer needed", 1));
  EXPECT_EQ(events[1].id(), 3);
  EXPECT_EQ(Row(events[1]), EventRow("run.state", "PENDING", "CANCELLED", "no longer needed", 1));

  absl::Status s = Cancel(job.id());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "cannot cancel job " + job.id() +
                             ": job is already CANCELLED; there is nothing to cancel");
  s = Cancel("j-missing");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "job j-missing not found");
  EXPECT_EQ(store_->LastEventId(), 3);  // the refused cancels recorded nothing

  v1::CancelJobResponse other;
  ASSERT_TRUE(Cancel(Submit("default-reason").id(), "", &other).ok());
  EXPECT_EQ(other.job().message(), "cancelled by user");
}

TEST_F(JobManagerTest, ResumeStartsANewAttemptFromTheNewestCheckpoint) {
  const v1::Job job = Submit("resume");
  v1::ResumeJobResponse resp;
  absl::Status s = Resume(job.id(), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "cannot resume job " + job.id() +
                             ": only CANCELLED or FAILED jobs can be resumed; job is QUEUED");

  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::Checkpoint ckpt;
  ckpt.set_job_id(job.id());
  ckpt.set_attempt(1);
  ckpt.set_state(v1::CHECKPOINT_STATE_COMPLETE);
  ckpt.set_step(200);
  absl::StatusOr<v1::Checkpoint> high = store_->AddCheckpoint(ckpt, {});
  ckpt.set_step(100);  // recorded later, but an older step
  absl::StatusOr<v1::Checkpoint> low = store_->AddCheckpoint(ckpt, {});
  ckpt.set_step(300);  // newer, but not every shard arrived: not resumable
  ckpt.set_state(v1::CHECKPOINT_STATE_PARTIAL);
  ASSERT_TRUE(store_->AddCheckpoint(ckpt, {}).ok());
  ckpt.set_step(250);
  ckpt.set_state(v1::CHECKPOINT_STATE_CORRUPT);
  ASSERT_TRUE(store_->AddCheckpoint(ckpt, {}).ok());
  ASSERT_TRUE(high.ok() && low.ok());
  ASSERT_NE(high->id(), low->id());

  clock_.AdvanceMicros(1'000'000);
  std::vector<v1::Event> events;
  ASSERT_TRUE(Resume(job.id(), &resp, &events).ok());
  const std::string reason = "resumed by user from checkpoint " + std::to_string(high->id()) +
                             " at step 200";
  EXPECT_EQ(resp.job().state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(resp.job().current_attempt(), 2);
  EXPECT_EQ(resp.job().message(), reason);
  EXPECT_EQ(resp.run().attempt(), 2);
  EXPECT_EQ(resp.run().state(), v1::RUN_STATE_PENDING);
  EXPECT_EQ(resp.run().resume_checkpoint_id(), high->id());
  EXPECT_EQ(resp.run().start_step(), 200);
  EXPECT_EQ(TimestampToMicros(resp.run().create_time()), clock_.NowMicros());
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()), resp.job()));

  std::vector<v1::Run> runs = store_->ListRuns(job.id());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].state(), v1::RUN_STATE_CANCELLED);
  EXPECT_TRUE(MessageDifferencer::Equals(runs[1], resp.run()));

  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(Row(events[0]), EventRow("job.state", "CANCELLED", "QUEUED", reason, 2));
  EXPECT_EQ(Row(events[1]), EventRow("run.state", "", "PENDING", "attempt created", 2));
}

TEST_F(JobManagerTest, ResumeWithoutCheckpointsStartsFresh) {
  const v1::Job job = Submit("fresh");
  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::ResumeJobResponse resp;
  ASSERT_TRUE(Resume(job.id(), &resp).ok());
  EXPECT_EQ(resp.job().message(), "resumed by user from the start (no complete checkpoint)");
  EXPECT_EQ(resp.run().resume_checkpoint_id(), 0);
  EXPECT_EQ(resp.run().start_step(), 0);
}

// Issue 15 §2: a resume may change the layout; the new spec is stored with the new run, the
// reason names both layouts, and the layout holds for later resumes too.
TEST_F(JobManagerTest, ResumeOnANewLayoutStoresTheSpecAndNamesBothLayouts) {
  const v1::Job job = SubmitText(BatchedSpecYaml("relayout"));
  ASSERT_TRUE(Cancel(job.id()).ok());
  const v1::Checkpoint ckpt = AddCompleteCheckpoint(job.id(), 50, 2);

  v1::ResumeJobRequest req;
  req.set_vision_degree(4);
  req.set_text_degree(4);
  req.set_data_parallel_size(2);
  req.set_placement(v1::PLACEMENT_SEPARATE);
  v1::ResumeJobResponse resp;
  std::vector<v1::Event> events;
  absl::Status s = ResumeWith(job.id(), req, &resp, &events);
  ASSERT_TRUE(s.ok()) << s;

  v1::JobSpec expected = job.spec();
  expected.mutable_vision()->set_degree(4);
  expected.mutable_text()->set_degree(4);
  expected.set_data_parallel_size(2);
  expected.set_placement(v1::PLACEMENT_SEPARATE);
  const v1::Job stored = Stored(job.id());
  EXPECT_TRUE(MessageDifferencer::Equals(stored.spec(), expected))
      << stored.spec().DebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(stored, resp.job()));
  ASSERT_EQ(admitted_.size(), 1u);  // the cluster was asked about the new spec
  EXPECT_TRUE(MessageDifferencer::Equals(admitted_[0], expected));

  const std::string reason =
      "resumed by user from checkpoint " + std::to_string(ckpt.id()) +
      " at step 50 on layout vision 4 (sp) x text 4 x dp 2, separate (was vision 2 (sp) x "
      "text 2 x dp 1, collocated)";
  EXPECT_EQ(stored.message(), reason);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(Row(events[0]), EventRow("job.state", "CANCELLED", "QUEUED", reason, 2));
  EXPECT_EQ(resp.run().resume_checkpoint_id(), ckpt.id());  // written by 2 ranks, read by 16
  EXPECT_EQ(resp.run().start_step(), 50);
  const std::vector<v1::Run> runs = store_->ListRuns(job.id());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_TRUE(MessageDifferencer::Equals(runs[1], resp.run()));

  // A later resume without layout fields keeps the new layout and says nothing about it.
  ASSERT_TRUE(Cancel(job.id()).ok());
  ASSERT_TRUE(ResumeWith(job.id(), v1::ResumeJobRequest(), &resp).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()).spec(), expected));
  EXPECT_EQ(resp.job().message(), "resumed by user from checkpoint " +
                                      std::to_string(ckpt.id()) + " at step 50");
  EXPECT_EQ(admitted_.size(), 1u);
}

// A job that never chose a micro-batch stored the whole share (4 of 4 samples at dp 1); on a new
// dp it keeps training without accumulation, as the same spec submitted with that dp would.
TEST_F(JobManagerTest, ANewDpKeepsAWholeShareMicroBatchWhole) {
  const v1::Job job = SubmitText(BatchedSpecYaml("whole-share", 0));
  ASSERT_EQ(job.spec().training().micro_batch_size(), 4);
  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::ResumeJobRequest req;
  req.set_data_parallel_size(2);
  v1::ResumeJobResponse resp;
  absl::Status s = ResumeWith(job.id(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Stored(job.id()).spec().training().micro_batch_size(), 2);
  EXPECT_EQ(Stored(job.id()).spec().data_parallel_size(), 2);
  EXPECT_EQ(resp.job().message(),
            "resumed by user from the start (no complete checkpoint) on layout vision 2 (sp) x "
            "text 2 x dp 2, collocated (was vision 2 (sp) x text 2 x dp 1, collocated), "
            "training.micro_batch_size 2 (was 4)");

  ASSERT_TRUE(Cancel(job.id()).ok());
  req.set_data_parallel_size(4);
  ASSERT_TRUE(ResumeWith(job.id(), req, &resp).ok());
  EXPECT_EQ(Stored(job.id()).spec().training().micro_batch_size(), 1);
  ASSERT_TRUE(Cancel(job.id()).ok());
  req.set_data_parallel_size(1);  // and back: the whole batch again
  ASSERT_TRUE(ResumeWith(job.id(), req, &resp).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()).spec(), job.spec()));
}

TEST_F(JobManagerTest, ResumeOnTheSameLayoutKeepsTheSpecAndAsksNoAdmission) {
  const v1::Job job = Submit("same-layout");
  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::ResumeJobRequest req;
  req.set_vision_degree(2);
  req.set_placement(v1::PLACEMENT_COLLOCATE);
  v1::ResumeJobResponse resp;
  ASSERT_TRUE(ResumeWith(job.id(), req, &resp).ok());
  EXPECT_EQ(resp.job().message(), "resumed by user from the start (no complete checkpoint)");
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()).spec(), job.spec()));
  EXPECT_TRUE(admitted_.empty());
}

// A layout that cannot work is INVALID_ARGUMENT naming the request's field, the value and the
// spec rule it breaks; nothing is written (job, runs, checkpoints and events stay as stored).
TEST_F(JobManagerTest, AnInvalidLayoutIsRefusedNamingTheFieldAndChangesNothing) {
  const v1::Job job = SubmitText(BatchedSpecYaml("bad-layout"));
  ASSERT_TRUE(Cancel(job.id()).ok());
  AddCompleteCheckpoint(job.id(), 50, 4);
  const std::vector<std::string> before = Snapshot(job.id());
  const int32_t kMax = 2147483647;
  struct Case {
    std::function<void(v1::ResumeJobRequest&)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::ResumeJobRequest& r) { r.set_text_degree(3); },
       "resume: text_degree 3: text.degree: 3 does not divide the 4 attention heads of tiny; "
       "text.degree: 3 does not divide the 2 KV heads of tiny and is not a multiple of them; "
       "text.degree: 3 does not divide the 128 MLP width (intermediate_size) of tiny"},
      {[](v1::ResumeJobRequest& r) { r.set_data_parallel_size(4); },
       "resume: data_parallel_size 4: training.micro_batch_size: 2 does not divide the 1 samples "
       "per data-parallel replica (training.batch_size 4 / data_parallel_size 4); use a divisor "
       "of 1"},
      {[](v1::ResumeJobRequest& r) { r.set_data_parallel_size(3); },
       "resume: data_parallel_size 3: training.batch_size: 4 is not divisible by "
       "data_parallel_size 3"},
      {[](v1::ResumeJobRequest& r) { r.set_vision_degree(0); },
       "resume: vision_degree 0: vision.degree: 0 must be at least 1"},
      {[](v1::ResumeJobRequest& r) { r.set_text_degree(-2); },
       "resume: text_degree -2: text.degree: -2 must be at least 1"},
      {[](v1::ResumeJobRequest& r) { r.set_data_parallel_size(-1); },
       "resume: data_parallel_size -1: data_parallel_size: -1 must be at least 1"},
      {[&](v1::ResumeJobRequest& r) { r.set_vision_degree(kMax); },
       "resume: vision_degree 2147483647: vision.degree: 2147483647 does not divide the 4 "
       "attention heads of the tiny vision encoder; vision.degree: 2147483647 is over the limit "
       "of 1024"},
      {[&](v1::ResumeJobRequest& r) {
         r.set_vision_degree(kMax);
         r.set_data_parallel_size(kMax);
       },
       "resume: vision_degree 2147483647, data_parallel_size 2147483647: vision.degree: "
       "2147483647 does not divide the 4 attention heads of the tiny vision encoder; "
       "training.batch_size: 4 is not divisible by data_parallel_size 2147483647; "
       "vision.degree: 2147483647 is over the limit of 1024; data_parallel_size: 2147483647 is "
       "over the limit of 4096"},
      {[](v1::ResumeJobRequest& r) { r.set_placement(static_cast<v1::Placement>(7)); },
       "resume: placement 7: not a placement; use one of collocate, separate"},
  };
  for (const Case& c : cases) {
    v1::ResumeJobRequest req;
    c.set(req);
    v1::ResumeJobResponse resp;
    absl::Status s = ResumeWith(job.id(), req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(Snapshot(job.id()), before) << c.message;
  }
  EXPECT_TRUE(admitted_.empty());  // refused before the cluster is asked
}

// The vision TP baseline's ZeRO-1 state holds flattened TP shards, so the ranks cannot reshard
// a change of its degree (comm::CheckReshardable): with a checkpoint to resume from, the resume
// is refused up front; without one, a fresh start on any degree is fine.
TEST_F(JobManagerTest, AVisionTensorParallelDegreeChangeIsRefusedWhenACheckpointMustBeResharded) {
  std::string yaml = SpecYaml("vision-tp");
  yaml.replace(yaml.find("parallelism: sequence"), 21, "parallelism: tensor");
  const v1::Job job = SubmitText(yaml);
  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::ResumeJobRequest req;
  req.set_vision_degree(4);
  req.set_text_degree(1);
  AddCompleteCheckpoint(job.id(), 50, 2);
  const std::vector<std::string> before = Snapshot(job.id());
  v1::ResumeJobResponse resp;
  absl::Status s = ResumeWith(job.id(), req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "resume: vision_degree 4, text_degree 1: a checkpoint of layout \"vision 2 (tp) x "
            "text 2 x dp 1, collocated\" cannot resume under \"vision 4 (tp) x text 1 x dp 1, "
            "collocated\": the vision tensor-parallel baseline keeps its ZeRO-1 state as "
            "flattened TP shards, so its vision degree and strategy must stay (Ulysses SP degree, "
            "text TP degree, data parallelism and placement may change)");
  EXPECT_EQ(Snapshot(job.id()), before);
  EXPECT_TRUE(admitted_.empty());
  req.clear_vision_degree();  // the text degree alone can change
  ASSERT_TRUE(ResumeWith(job.id(), req, &resp).ok());
  EXPECT_EQ(Stored(job.id()).spec().text().degree(), 1);
}

TEST_F(JobManagerTest, ALayoutTheClusterRefusesChangesNothing) {
  const v1::Job job = SubmitText(BatchedSpecYaml("too-big"));
  ASSERT_TRUE(Cancel(job.id()).ok());
  const std::vector<std::string> before = Snapshot(job.id());
  admission_ = absl::FailedPreconditionError("the job can never fit this cluster: 8 ranks");
  v1::ResumeJobRequest req;
  req.set_data_parallel_size(2);
  req.set_vision_degree(4);
  v1::ResumeJobResponse resp;
  absl::Status s = ResumeWith(job.id(), req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "resume: vision_degree 4, data_parallel_size 2: the job can never fit "
                         "this cluster: 8 ranks");
  ASSERT_EQ(admitted_.size(), 1u);
  EXPECT_EQ(admitted_[0].vision().degree(), 4);
  EXPECT_EQ(admitted_[0].data_parallel_size(), 2);
  EXPECT_EQ(Snapshot(job.id()), before);
}

TEST_F(JobManagerTest, EveryTransitionIsRecordedInOrder) {
  const v1::Job job = Submit("history");
  const std::string other = Submit("other").id();  // its events must not mix in
  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::ResumeJobResponse resp;
  ASSERT_TRUE(Resume(job.id(), &resp).ok());
  ASSERT_TRUE(Cancel(job.id(), "second thoughts").ok());
  ASSERT_TRUE(Resume(job.id(), &resp).ok());

  const std::string resumed = "resumed by user from the start (no complete checkpoint)";
  EXPECT_EQ(History(job.id()),
            (std::vector<EventRow>{
                {"job.state", "", "QUEUED", "submitted", 1},
                {"job.state", "QUEUED", "CANCELLED", "cancelled by user", 1},
                {"run.state", "PENDING", "CANCELLED", "cancelled by user", 1},
                {"job.state", "CANCELLED", "QUEUED", resumed, 2},
                {"run.state", "", "PENDING", "attempt created", 2},
                {"job.state", "QUEUED", "CANCELLED", "second thoughts", 2},
                {"run.state", "PENDING", "CANCELLED", "second thoughts", 2},
                {"job.state", "CANCELLED", "QUEUED", resumed, 3},
                {"run.state", "", "PENDING", "attempt created", 3},
            }));
  EXPECT_EQ(History(other), (std::vector<EventRow>{{"job.state", "", "QUEUED", "submitted", 1}}));

  // Ids increase, and each job transition is one the state machine allows.
  int64_t last_id = 0;
  for (const v1::Event& e : store_->ListEvents(job.id(), 0, 0)) {
    EXPECT_GT(e.id(), last_id);
    last_id = e.id();
    if (e.type() != "job.state" || e.from_state().empty()) continue;
    auto from = ParseEnumName(v1::JobState_descriptor(), e.from_state());
    auto to = ParseEnumName(v1::JobState_descriptor(), e.to_state());
    ASSERT_TRUE(from.has_value() && to.has_value());
    EXPECT_TRUE(CheckJobTransition(static_cast<v1::JobState>(*from),
                                   static_cast<v1::JobState>(*to))
                    .ok())
        << e.from_state() << " -> " << e.to_state();
  }
}

}  // namespace
}  // namespace dhp::controller
