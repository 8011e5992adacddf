// SubmitJob in batches (controller_submit.cc): the submits queued while the loop is busy are
// stored together and scheduled in one pass, and each still gets its own answer.
#include <atomic>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "controller/controller_test_fixture.h"
#include "controller/sqlite_db.h"
#include "google/protobuf/util/message_differencer.h"

namespace dhp::controller {
namespace {

class ControllerSubmitTest : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    StartController();
  }

  // Holds the loop (a call in `lane` that waits) until the returned promise is set.
  std::shared_ptr<std::promise<void>> HoldLoop(api::Lane lane = api::Lane::kUser) {
    auto release = std::make_shared<std::promise<void>>();
    std::shared_future<void> gate = release->get_future().share();
    auto held = std::make_shared<std::promise<void>>();
    std::future<void> holding = held->get_future();
    controller_->Dispatch(
        [gate, held] {
          held->set_value();
          gate.wait();
          return absl::OkStatus();
        },
        [](const absl::Status&) {}, lane);
    holding.wait();
    return release;
  }

  // One asynchronous submit; its answer arrives in the future.
  struct Call {
    v1::SubmitJobRequest req;
    v1::SubmitJobResponse resp;
    std::promise<absl::Status> answered;
    std::atomic<bool> taken{false};  // the loop took it
  };
  std::future<absl::Status> SubmitAsync(Call& call) {
    std::future<absl::Status> answer = call.answered.get_future();
    controller_->SubmitJobAsync(
        call.req, &call.resp, [&call](const absl::Status& s) { call.answered.set_value(s); },
        [&call] { call.taken = true; });
    return answer;
  }
};

constexpr char kNeverFits[] =
    "name: wide\n"
    "model: {preset: tiny}\n"
    "vision: {parallelism: sequence, degree: 4}\n"
    "text: {parallelism: tensor, degree: 4}\n"
    "training: {max_steps: 10}\n"
    "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";

TEST_F(ControllerSubmitTest, SubmitsQueuedWhileTheLoopIsBusyAreOneBatchAndEachGetsItsAnswer) {
  ASSERT_TRUE(Register("n1", 1).ok());  // room for one tiny job
  std::shared_ptr<std::promise<void>> release = HoldLoop();

  constexpr int kJobs = 6;
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::future<absl::Status>> answers;
  auto add = [&](const std::string& spec, bool dry_run) {
    calls.push_back(std::make_unique<Call>());
    calls.back()->req.set_spec_text(spec);
    calls.back()->req.set_dry_run(dry_run);
    answers.push_back(SubmitAsync(*calls.back()));
  };
  for (int i = 0; i < kJobs; ++i) add(kTinySpec, false);  // calls 0-5
  add(kTinySpec, true);                                   // 6: a dry run
  add(kNeverFits, false);                                 // 7: refused at admission
  add("name: [", false);                                  // 8: not YAML: answered at once
  ASSERT_EQ(answers[8].wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(answers[8].get().code(), absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 8; ++i) {  // the others wait for the loop
    EXPECT_EQ(answers[i].wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
    EXPECT_FALSE(calls[i]->taken);
  }
  release->set_value();
  for (int i = 0; i < 8; ++i) answers[i].wait();
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(calls[i]->taken) << i;
  EXPECT_FALSE(calls[8]->taken);  // refused before it was queued

  std::set<std::string> ids;
  int64_t last_seq = 0;
  for (int i = 0; i < kJobs; ++i) {
    absl::Status s = answers[i].get();
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    const v1::Job& job = calls[i]->resp.job();
    ids.insert(job.id());
    EXPECT_GT(job.submit_seq(), last_seq) << i << ": jobs keep the order they were submitted in";
    last_seq = job.submit_seq();
    // Each answer is the job as the batch's one scheduling pass left it: the first placed, the
    // others waiting, with the reason.
    if (i == 0) {
      EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED) << job.message();
    } else {
      EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
      EXPECT_NE(job.message(), "submitted") << i;
    }
    v1::GetJobRequest get;  // and as stored
    get.set_job_id(job.id());
    v1::GetJobResponse stored;
    ASSERT_TRUE(controller_->GetJob(get, &stored).ok());
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(stored.job(), job))
        << i << "\nanswered: " << job.DebugString() << "\nstored: " << stored.job().DebugString();
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kJobs));
  absl::Status dry = answers[6].get();
  EXPECT_TRUE(dry.ok()) << dry;
  EXPECT_EQ(calls[6]->resp.job().id(), "");
  absl::Status refused = answers[7].get();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("can never fit"), std::string::npos) << refused;

  // The loop took the eight that waited as one batch.
  const std::string metrics = controller_->MetricsText();
  EXPECT_TRUE(HasLine(metrics, "dhp_controller_submit_batch_jobs_count 1")) << metrics;
  EXPECT_TRUE(HasLine(metrics, "dhp_controller_submit_batch_jobs_sum 8")) << metrics;
  // Stored: the six jobs, each with its one job.state event; nothing of the others.
  v1::ListJobsResponse list;
  ASSERT_TRUE(controller_->ListJobs(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), kJobs);
  int submitted = 0;
  for (const v1::Event& e : Replay("")) {
    if (e.type() == "job.state" && e.from_state().empty()) {
      EXPECT_EQ(ids.count(e.job_id()), 1u) << e.job_id();
      ++submitted;
    }
  }
  EXPECT_EQ(submitted, kJobs);
}

// The batch's pass decides before the jobs are stored (their notes go in the same transaction).
// A job that then cannot be stored (here a trigger refuses its row) fails alone and leaves the
// queue: the slot the pass had given it goes to the next job, and nothing waits behind it.
TEST_F(ControllerSubmitTest, AJobOfABatchThatCannotBeStoredFailsAloneAndGivesUpWhatThePassGaveIt) {
  ASSERT_TRUE(Register("n1", 1).ok());  // room for one tiny job
  {
    absl::StatusOr<std::unique_ptr<SqliteDb>> other = SqliteDb::Open(path_);
    ASSERT_TRUE(other.ok()) << other.status();
    ASSERT_TRUE((*other)
                    ->Exec("CREATE TRIGGER boom BEFORE INSERT ON jobs WHEN NEW.name = 'boom' "
                           "BEGIN SELECT RAISE(ABORT, 'boom refused'); END;")
                    .ok());
  }
  std::shared_ptr<std::promise<void>> release = HoldLoop();
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::future<absl::Status>> answers;
  for (const char* name : {"boom", "first", "second"}) {  // the pass places the first it gets
    calls.push_back(std::make_unique<Call>());
    calls.back()->req.set_spec_text(std::string(kTinySpec).replace(6, 4, name));
    answers.push_back(SubmitAsync(*calls.back()));
  }
  release->set_value();
  absl::Status boom = answers[0].get();
  EXPECT_FALSE(boom.ok());
  EXPECT_NE(boom.message().find("boom refused"), std::string::npos) << boom;
  for (int i = 1; i < 3; ++i) {
    absl::Status s = answers[i].get();
    ASSERT_TRUE(s.ok()) << i << ": " << s;
    const v1::Job& job = calls[i]->resp.job();
    EXPECT_EQ(job.state(), i == 1 ? v1::JOB_STATE_SCHEDULED : v1::JOB_STATE_QUEUED) << i;
    if (i == 2) EXPECT_NE(job.message().find("waiting"), std::string::npos) << job.message();
    v1::GetJobRequest get;
    get.set_job_id(job.id());
    v1::GetJobResponse stored;
    ASSERT_TRUE(controller_->GetJob(get, &stored).ok());
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(stored.job(), job))
        << i << "\nanswered: " << job.DebugString() << "\nstored: " << stored.job().DebugString();
  }
  v1::ListJobsResponse list;
  ASSERT_TRUE(controller_->ListJobs(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 2);
  // A new node: the second job gets it; the refused one is not queued to take it.
  ASSERT_TRUE(Register("n2", 1).ok());
  v1::GetJobRequest get;
  get.set_job_id(calls[2]->resp.job().id());
  v1::GetJobResponse second;
  ASSERT_TRUE(controller_->GetJob(get, &second).ok());
  EXPECT_EQ(second.job().state(), v1::JOB_STATE_SCHEDULED) << second.job().message();
}

// Calls waiting for the loop run users' first (api::Lane), taking turns with the worker calls
// while both wait, so that users cannot starve the heartbeats.
TEST_F(ControllerSubmitTest, UsersCallsGoAheadOfWaitingWorkerCallsTakingTurns) {
  std::shared_ptr<std::promise<void>> release = HoldLoop(api::Lane::kWorker);
  std::vector<std::string> ran;  // on the loop only
  std::vector<std::future<absl::Status>> answers;
  std::vector<std::shared_ptr<std::promise<absl::Status>>> promises;
  auto queue = [&](const std::string& name, api::Lane lane) {
    auto answered = std::make_shared<std::promise<absl::Status>>();
    answers.push_back(answered->get_future());
    controller_->Dispatch(
        [&ran, name] {
          ran.push_back(name);
          return absl::OkStatus();
        },
        [answered](const absl::Status& s) { answered->set_value(s); }, lane);
  };
  for (const char* w : {"w1", "w2", "w3"}) queue(w, api::Lane::kWorker);
  for (const char* u : {"u1", "u2", "u3", "u4", "u5", "u6"}) queue(u, api::Lane::kUser);
  release->set_value();
  for (auto& a : answers) EXPECT_TRUE(a.get().ok());
  EXPECT_EQ(ran, (std::vector<std::string>{"u1", "w1", "u2", "w2", "u3", "w3", "u4", "u5", "u6"}));
}

TEST_F(ControllerSubmitTest, AnIdleLoopTakesASubmitAtOnceAsABatchOfOne) {
  for (int i = 0; i < 3; ++i) Submit();
  const std::string metrics = controller_->MetricsText();
  EXPECT_TRUE(HasLine(metrics, "dhp_controller_submit_batch_jobs_count 3")) << metrics;
  EXPECT_TRUE(HasLine(metrics, "dhp_controller_submit_batch_jobs_sum 3")) << metrics;
}

TEST_F(ControllerSubmitTest, SubmitsQueuedWhenTheControllerStopsAreAnsweredUnavailable) {
  std::shared_ptr<std::promise<void>> release = HoldLoop();
  Call call;
  call.req.set_spec_text(kTinySpec);
  std::future<absl::Status> answer = SubmitAsync(call);
  std::thread stopper([this] { controller_->Stop(); });
  release->set_value();
  stopper.join();
  // Answered either way: stored before the stop took the loop, or UNAVAILABLE; never lost.
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  absl::Status s = answer.get();
  EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kUnavailable) << s;
  Call late;
  late.req.set_spec_text(kTinySpec);
  EXPECT_EQ(SubmitAsync(late).get().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dhp::controller
