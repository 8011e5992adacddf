// CheckpointWriter with fake write tasks and a fake controller: submitting never waits for a
// controller that is down (the report is retried in the background, however long the outage,
// with a line now and then, and delivered once it is back), at most max_in_flight checkpoints
// are in flight (the only bound on an outage), a write failure or a definite answer to a report
// is kept and names the step and the cause, destruction drains, and synchronous mode runs the
// task before Submit returns.
#include "worker/rank/checkpoint_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dhp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Opened once; Wait blocks until then (or 30 s, so that a broken writer fails, not hangs).
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 30s, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// The controller's side: records the steps it accepted; UNAVAILABLE while down (and for the
// first `down_for_calls` calls), DEADLINE_EXCEEDED while unreachable.
struct FakeController {
  absl::Status Report(const v1::ReportCheckpointRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    ++calls;
    if (down || calls <= down_for_calls) return absl::UnavailableError("controller restarting");
    if (unreachable) return absl::DeadlineExceededError("Deadline Exceeded");
    if (!reject.ok()) return reject;
    steps.push_back(r.step());
    return absl::OkStatus();
  }
  std::vector<int64_t> Steps() {
    std::lock_guard<std::mutex> lock(mu);
    return steps;
  }
  void SetDown(bool d) {
    std::lock_guard<std::mutex> lock(mu);
    down = d;
  }
  int Calls() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
  std::mutex mu;
  bool down = false;
  bool unreachable = false;
  int down_for_calls = 0;
  absl::Status reject;
  int calls = 0;
  std::vector<int64_t> steps;
};

// A task whose write takes no time, unless `gate` is given: then it waits for it.
CheckpointTask Task(int64_t step, Gate* gate = nullptr, absl::Status fail = absl::OkStatus(),
                    std::atomic<int>* written = nullptr) {
  CheckpointTask t;
  t.step = step;
  t.write = [=]() -> absl::StatusOr<v1::ReportCheckpointRequest> {
    if (gate != nullptr && !gate->Wait()) return absl::DeadlineExceededError("gate never opened");
    if (!fail.ok()) return fail;
    if (written != nullptr) ++*written;
    v1::ReportCheckpointRequest r;
    r.set_step(step);
    r.set_path(absl::StrFormat("/ckpt/step-%08d", step));
    r.mutable_shard()->set_file("rank-00000.safetensors");
    r.mutable_shard()->set_size_bytes(100);
    r.mutable_shard()->set_crc32c("0a1b2c3d");
    return r;
  };
  return t;
}

// Back-off as in production (100 ms doubling to 10 s), but each back-off sleeps 1 ms: the
// writer counts what it was asked to sleep, so 30 retries make an outage of about 4.5 min.
CheckpointWriterOptions Options(bool async, int max_in_flight) {
  CheckpointWriterOptions o;
  o.async = async;
  o.max_in_flight = max_in_flight;
  o.sleep = [](std::chrono::milliseconds) { std::this_thread::sleep_for(1ms); };
  return o;
}

CheckpointWriterOptions Options() { return Options(true, 2); }

CheckpointWriter::ReportFn Reporter(FakeController& c) {
  return [&c](const v1::ReportCheckpointRequest& r) { return c.Report(r); };
}

// The lines the writer logs (from its own thread).
struct Lines {
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.push_back(line);
    };
  }
  std::vector<std::string> Get() {
    std::lock_guard<std::mutex> lock(mu);
    return lines;
  }
  std::mutex mu;
  std::vector<std::string> lines;
};

void WaitForCalls(FakeController& c, int n) {
  while (c.Calls() < n) std::this_thread::sleep_for(1ms);
}

TEST(CheckpointWriterTest, AControllerThatIsDownDoesNotHoldUpTrainingAndHearsOfItOnceBack) {
  FakeController controller;
  controller.down = true;
  CheckpointWriter writer(Reporter(controller), Options());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(writer.Submit(Task(100)).ok());
  // "Training" goes on: the boundary returned at once, and nothing failed meanwhile.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  WaitForCalls(controller, 3);
  EXPECT_TRUE(writer.status().ok()) << writer.status();
  EXPECT_EQ(writer.in_flight(), 1);
  EXPECT_TRUE(controller.Steps().empty());
  controller.SetDown(false);
  ASSERT_TRUE(writer.Submit(Task(200)).ok());
  EXPECT_TRUE(writer.Drain().ok()) << writer.status();
  EXPECT_EQ(writer.in_flight(), 0);
  EXPECT_THAT(controller.Steps(), ElementsAre(100, 200));  // in order, each once
  EXPECT_THAT(writer.TakeNotes(),
              ElementsAre(HasSubstr("checkpoint step 100: /ckpt/step-00000100/rank-00000."
                                    "safetensors, 100 bytes, crc32c 0a1b2c3d"),
                          HasSubstr("checkpoint step 200: ")));
  EXPECT_TRUE(writer.TakeNotes().empty());
}

TEST(CheckpointWriterTest, AtMostTwoInFlightAndTheThirdWaitsForTheOldest) {
  FakeController controller;
  CheckpointWriter writer(Reporter(controller), Options(true, 2));
  Gate first, second;
  ASSERT_TRUE(writer.Submit(Task(1, &first)).ok());
  ASSERT_TRUE(writer.Submit(Task(2, &second)).ok());
  EXPECT_EQ(writer.in_flight(), 2);
  std::atomic<bool> third_returned{false};
  std::thread boundary([&] {
    EXPECT_TRUE(writer.Submit(Task(3)).ok());
    third_returned = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(third_returned) << "a third checkpoint was taken with two in flight";
  first.Open();  // the oldest ends: the third is admitted while the second still writes
  boundary.join();
  EXPECT_TRUE(third_returned);
  EXPECT_EQ(writer.in_flight(), 2);
  EXPECT_THAT(controller.Steps(), ElementsAre(1));
  second.Open();
  EXPECT_TRUE(writer.Drain().ok());
  EXPECT_THAT(controller.Steps(), ElementsAre(1, 2, 3));
}

TEST(CheckpointWriterTest, AWriteFailureIsKeptNamingTheStepAndLaterCheckpointsAreNotWritten) {
  FakeController controller;
  CheckpointWriter writer(Reporter(controller), {});
  Gate gate;
  std::atomic<int> written{0};
  ASSERT_TRUE(writer.Submit(Task(5, &gate, absl::ResourceExhaustedError(
                                               "/ckpt/step-00000005: No space left on device")))
                  .ok());
  ASSERT_TRUE(writer.Submit(Task(6, nullptr, absl::OkStatus(), &written)).ok());
  EXPECT_TRUE(writer.status().ok());  // the next boundary has not seen it yet
  gate.Open();
  const absl::Status s = writer.Drain();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "checkpoint at step 5: /ckpt/step-00000005: No space left on device");
  EXPECT_EQ(writer.status(), s);  // kept: what every later step boundary sees
  EXPECT_EQ(written, 0) << "step 6 was written after step 5 failed";
  EXPECT_EQ(writer.Submit(Task(7, nullptr, absl::OkStatus(), &written)), s);
  EXPECT_TRUE(writer.Drain() == s);
  EXPECT_EQ(written, 0);
  EXPECT_TRUE(controller.Steps().empty());
}

TEST(CheckpointWriterTest, AnOutageFarPastTheOldBudgetFailsNothingAndOnlyTheBoundWaits) {
  FakeController controller;
  controller.down = true;
  Lines log;
  CheckpointWriterOptions o = Options(true, 2);
  o.log = log.Sink();
  CheckpointWriter writer(Reporter(controller), o);
  ASSERT_TRUE(writer.Submit(Task(1)).ok());
  // Training goes on while step 1's report is retried 40 times: backed off 100 ms .. 10 s, that
  // is 333 s, past the 300 s (dhp-rank's --timeout) that once failed the rank.
  int steps = 0;
  while (controller.Calls() < 40) {
    ASSERT_TRUE(writer.status().ok()) << "step boundary " << steps << ": " << writer.status();
    ++steps;
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_GT(steps, 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(writer.Submit(Task(2)).ok());  // a second checkpoint: taken at once
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  std::atomic<bool> third_snapshot{false}, third_returned{false};
  std::thread boundary([&] {  // as job_rank.cc: room first, then the snapshot, then Submit
    EXPECT_TRUE(writer.WaitForRoom().ok());
    third_snapshot = true;
    EXPECT_TRUE(writer.Submit(Task(3)).ok());
    third_returned = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(third_snapshot) << "a third snapshot was taken with two checkpoints unreported";
  EXPECT_FALSE(third_returned);
  EXPECT_EQ(writer.in_flight(), 2);
  EXPECT_TRUE(writer.status().ok()) << writer.status();
  EXPECT_TRUE(controller.Steps().empty());
  controller.SetDown(false);  // back: the reports go out in order, and the third is taken
  boundary.join();
  EXPECT_TRUE(writer.Drain().ok()) << writer.status();
  EXPECT_THAT(controller.Steps(), ElementsAre(1, 2, 3));
  // Operators see why, about once a minute of the outage (the first after a minute).
  const std::vector<std::string> lines = log.Get();
  ASSERT_GE(lines.size(), 5u);
  EXPECT_THAT(lines[0], ::testing::MatchesRegex(
                            "checkpoint at step 1: ReportCheckpoint unanswered for 6[0-9] s "
                            "\\(UNAVAILABLE: controller restarting\\); retrying every 10 s; 1 of "
                            "at most 2 checkpoints in flight, training goes on"));
  EXPECT_THAT(lines, ::testing::Contains(HasSubstr(
                         "2 of at most 2 checkpoints in flight: the next checkpoint waits")));
}

TEST(CheckpointWriterTest, AWrittenCheckpointFreesItsSnapshotWhileItsReportWaits) {
  FakeController controller;
  controller.down = true;
  CheckpointWriter writer(Reporter(controller), Options());
  auto snapshot = std::make_shared<std::vector<float>>(1000);
  const std::weak_ptr<std::vector<float>> alive = snapshot;
  CheckpointTask task = Task(11);
  task.write = [inner = task.write, snapshot]() { return inner(); };
  snapshot.reset();
  ASSERT_TRUE(writer.Submit(std::move(task)).ok());
  WaitForCalls(controller, 3);  // written; the report waits for the controller
  EXPECT_TRUE(alive.expired()) << "the snapshot of a written checkpoint is still held";
  EXPECT_EQ(writer.in_flight(), 1);
  controller.SetDown(false);
  EXPECT_TRUE(writer.Drain().ok()) << writer.status();
  EXPECT_THAT(controller.Steps(), ElementsAre(11));
}

TEST(CheckpointWriterTest, AControllerThatDoesNotAnswerInTimeIsRetriedAsDown) {
  FakeController controller;
  controller.unreachable = true;  // DEADLINE_EXCEEDED
  CheckpointWriter writer(Reporter(controller), Options());
  ASSERT_TRUE(writer.Submit(Task(9)).ok());
  WaitForCalls(controller, 40);
  EXPECT_TRUE(writer.status().ok()) << writer.status();
  {
    std::lock_guard<std::mutex> lock(controller.mu);
    controller.unreachable = false;
  }
  EXPECT_TRUE(writer.Drain().ok()) << writer.status();
  EXPECT_THAT(controller.Steps(), ElementsAre(9));
}

TEST(CheckpointWriterTest, ADefiniteAnswerFailsAtOnceNamingTheStepEvenAfterAnOutage) {
  for (const absl::Status& answer :
       {absl::FailedPreconditionError("attempt 1 of job j is no longer current"),
        absl::NotFoundError("no job j"),
        absl::InvalidArgumentError("shard.file: \"../x\" is not a plain file name")}) {
    FakeController controller;
    controller.down_for_calls = 3;  // then the answer
    controller.reject = answer;
    CheckpointWriter writer(Reporter(controller), Options());
    ASSERT_TRUE(writer.Submit(Task(8)).ok());
    const absl::Status s = writer.Drain();
    EXPECT_EQ(s.code(), answer.code());
    EXPECT_EQ(s.message(), absl::StrCat("checkpoint at step 8: ReportCheckpoint: ",
                                        answer.message()));
    EXPECT_EQ(controller.Calls(), 4) << "retried after the answer " << answer;
    EXPECT_EQ(writer.Submit(Task(10)), s);
  }
}

TEST(CheckpointWriterTest, DestructionWaitsForEveryCheckpointInFlight) {
  FakeController controller;
  Gate gate;
  {
    CheckpointWriter writer(Reporter(controller), {});
    ASSERT_TRUE(writer.Submit(Task(1, &gate)).ok());
    ASSERT_TRUE(writer.Submit(Task(2)).ok());
    std::thread([&] {
      std::this_thread::sleep_for(50ms);
      gate.Open();
    }).detach();
  }
  EXPECT_THAT(controller.Steps(), ElementsAre(1, 2));
}

TEST(CheckpointWriterTest, SynchronousWritesEndBeforeSubmitReturnsOnTheCallersThread) {
  FakeController controller;
  std::thread::id ran_on;
  CheckpointWriter writer(
      [&](const v1::ReportCheckpointRequest& r) {
        ran_on = std::this_thread::get_id();
        return controller.Report(r);
      },
      Options(false, 2));
  ASSERT_TRUE(writer.Submit(Task(4)).ok());
  EXPECT_THAT(controller.Steps(), ElementsAre(4));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(writer.in_flight(), 0);
  const absl::Status s = writer.Submit(Task(6, nullptr, absl::DataLossError("short write")));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "checkpoint at step 6: short write");
  EXPECT_EQ(writer.status(), s);
}

}  // namespace
}  // namespace dhp
