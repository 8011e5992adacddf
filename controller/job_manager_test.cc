// Tests JobManager on an in-memory Store with a FakeClock: submit (text, structured, dry run,
// invalid), get, list (filters, pages), cancel, resume (from the newest checkpoint), progress,
// and that every job transition is recorded as an event. Resume on a new layout:
// job_manager_relayout_test.cc.
#include "controller/job_manager.h"
#include "controller/job_manager_test_fixture.h"

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

TEST_F(JobManagerTest, SubmitFromYamlStoresQueuedJobWithPendingRunAndOneEvent) {
  const int64_t now = clock_.NowMicros();
  v1::SubmitJobRequest req;
  req.set_spec_text(SpecYaml("demo"));
  v1::SubmitJobResponse resp;
  std::vector<v1::Event> events;
  ASSERT_TRUE(jobs_->Submit(req, &resp, &events).ok());

  const v1::Job& job = resp.job();
  EXPECT_EQ(job.id().rfind("j-", 0), 0u) << job.id();
  EXPECT_EQ(job.id().size(), 15u) << job.id();  // "j-" + 13 hex digits (common/ids.h)
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

// Text that is not UTF-8 is refused before the loop, naming the field, however the spec came:
// so the store need not check the spec again (Submission::spec_checked).
TEST_F(JobManagerTest, ValidateSubmissionRefusesASpecThatIsNotUtf8) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(SpecYaml("demo"), SpecOptions{kRoot});
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  (*req.mutable_spec()->mutable_labels())["team"] = "v\xffision";
  absl::StatusOr<v1::JobSpec> refused = jobs_->ValidateSubmission(req);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "spec.labels.team: not valid UTF-8: byte 0xFF at line 1, column 2 (offset 1)");
  (*req.mutable_spec()->mutable_labels())["team"] = "vision";
  EXPECT_TRUE(jobs_->ValidateSubmission(req).ok());
}

// A batch is one transaction; when it cannot be stored, each job is tried on its own, so that
// the one at fault (here a label the store refuses: ValidateSubmission would have refused it)
// fails alone with the store's reason and the others are stored, in order.
TEST_F(JobManagerTest, SubmitAllStoresABatchAndABadJobFailsAlone) {
  std::vector<v1::JobSpec> specs;
  for (const char* name : {"a", "b", "c"}) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(SpecYaml(name), SpecOptions{kRoot});
    ASSERT_TRUE(spec.ok()) << spec.status();
    specs.push_back(*spec);
  }
  std::vector<v1::SubmitJobResponse> resps(3);
  auto batch_of = [&] {
    std::vector<Submission> batch(3);
    for (int i = 0; i < 3; ++i) batch[i] = Submission{&specs[i], false, "ann", &resps[i], {}};
    return batch;
  };
  std::vector<Submission> batch = batch_of();
  std::vector<v1::Event> events;
  jobs_->SubmitAll(batch, &events);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(batch[i].status.ok()) << batch[i].status;
    EXPECT_TRUE(MessageDifferencer::Equals(Stored(resps[i].job().id()), resps[i].job()));
    EXPECT_EQ(resps[i].job().owner(), "ann");
    if (i > 0) {
      EXPECT_GT(resps[i].job().submit_seq(), resps[i - 1].job().submit_seq());
    }
  }
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].job_id(), resps[2].job().id());

  (*specs[1].mutable_labels())["team"] = "\xff";  // not UTF-8: the store refuses the row
  batch = batch_of();
  events.clear();
  jobs_->SubmitAll(batch, &events);
  EXPECT_TRUE(batch[0].status.ok()) << batch[0].status;
  EXPECT_EQ(batch[1].status.code(), absl::StatusCode::kInvalidArgument) << batch[1].status;
  EXPECT_TRUE(batch[2].status.ok()) << batch[2].status;
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].job_id(), resps[0].job().id());
  EXPECT_EQ(events[1].job_id(), resps[2].job().id());
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->List(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 5);
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
