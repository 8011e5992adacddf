// CheckpointWriter with fake write tasks and a fake controller: submitting never waits for a
// controller that is down (the report is retried in the background and delivered once it is
// back), at most max_in_flight checkpoints are in flight, a write or report failure is kept
// and names the step and the cause, destruction drains, and synchronous mode runs the task
// before Submit returns.
#include "worker/rank/checkpoint_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "worker/rank/retry_unavailable.h"

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

// The controller's side: records the steps it accepted; UNAVAILABLE while down.
struct FakeController {
  absl::Status Report(const v1::ReportCheckpointRequest& r) {
    std::lock_guard<std::mutex> lock(mu);
    ++calls;
    if (down) return absl::UnavailableError("controller restarting");
    if (!reject.ok()) return reject;
    steps.push_back(r.step());
    return absl::OkStatus();
  }
  std::vector<int64_t> Steps() {
    std::lock_guard<std::mutex> lock(mu);
    return steps;
  }
  std::mutex mu;
  bool down = false;
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

CheckpointWriterOptions Options(bool async, int max_in_flight) {
  CheckpointWriterOptions o;
  o.async = async;
  o.max_in_flight = max_in_flight;
  return o;
}

CheckpointWriter::ReportFn Reporter(FakeController& c) {
  return [&c](const v1::ReportCheckpointRequest& r) { return c.Report(r); };
}

// As job_rank.cc reports: retried while UNAVAILABLE, for a budget of 300 s (backed off 1 ms).
CheckpointWriter::ReportFn RetryingReporter(FakeController& c) {
  return [&c](const v1::ReportCheckpointRequest& r) {
    return RetryWhileUnavailable([&] { return c.Report(r); }, 300s,
                                 [](std::chrono::milliseconds) { std::this_thread::sleep_for(1ms); });
  };
}

TEST(CheckpointWriterTest, AControllerThatIsDownDoesNotHoldUpTrainingAndHearsOfItOnceBack) {
  FakeController controller;
  controller.down = true;
  CheckpointWriter writer(RetryingReporter(controller), {});
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(writer.Submit(Task(100)).ok());
  // "Training" goes on: the boundary returned at once, and nothing failed meanwhile.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  while ([&] { std::lock_guard<std::mutex> l(controller.mu); return controller.calls < 3; }()) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(writer.status().ok()) << writer.status();
  EXPECT_EQ(writer.in_flight(), 1);
  EXPECT_TRUE(controller.Steps().empty());
  {
    std::lock_guard<std::mutex> lock(controller.mu);
    controller.down = false;
  }
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

TEST(CheckpointWriterTest, AReportRefusedOrUnavailableBeyondTheBudgetFailsNamingTheStep) {
  FakeController controller;
  controller.reject = absl::FailedPreconditionError("attempt 1 of job j is no longer current");
  CheckpointWriter writer(Reporter(controller), {});
  ASSERT_TRUE(writer.Submit(Task(8)).ok());
  const absl::Status s = writer.Drain();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "checkpoint at step 8: ReportCheckpoint: attempt 1 of job j is no longer current");

  FakeController down;
  down.down = true;
  CheckpointWriter gives_up(
      [&down](const v1::ReportCheckpointRequest& r) {
        return RetryWhileUnavailable([&] { return down.Report(r); }, 1s,
                                     [](std::chrono::milliseconds) {});
      },
      {});
  ASSERT_TRUE(gives_up.Submit(Task(9)).ok());
  const absl::Status u = gives_up.Drain();
  EXPECT_EQ(u.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(u.message(), "checkpoint at step 9: ReportCheckpoint: controller restarting");
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
