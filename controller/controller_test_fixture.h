// The Controller's test fixture: a real Controller (loop thread, timers) over a Store in a
// temporary file (with a reader connection to it, as dhp-controller has), the system clock and
// a metrics registry, with the calls most tests make.
// Shared by controller_test, controller_watch_test, controller_nodes_test and
// controller_export_test.
#ifndef DHP_CONTROLLER_CONTROLLER_TEST_FIXTURE_H_
#define DHP_CONTROLLER_CONTROLLER_TEST_FIXTURE_H_

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "api/service.h"
#include "controller/controller.h"
#include "controller/store.h"
#include "gtest/gtest.h"

namespace dhp::controller {

// (type, from, to, reason) of an event.
using EventRow = std::tuple<std::string, std::string, std::string, std::string>;
std::vector<EventRow> Rows(const std::vector<v1::Event>& events) {
  std::vector<EventRow> rows;
  for (const v1::Event& e : events) {
    rows.push_back({e.type(), e.from_state(), e.to_state(), e.reason()});
  }
  return rows;
}

// Collects events; can refuse writes after `write_limit` events, or report a vanished client.
class CollectingSink : public api::EventSink {
 public:
  explicit CollectingSink(size_t write_limit = SIZE_MAX) : write_limit_(write_limit) {}

  bool Write(const v1::Event& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(event);
    cv_.notify_all();
    return events_.size() < write_limit_;
  }
  bool IsCancelled() const override { return cancelled_.load(); }

  void Cancel() { cancelled_ = true; }
  // True once at least `n` events arrived (waits up to 10 s).
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return events_.size() >= n; });
  }
  std::vector<v1::Event> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  const size_t write_limit_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;  // guards events_
  std::condition_variable cv_;
  std::vector<v1::Event> events_;
};

// True when `text` has `line` as one of its lines.
inline bool HasLine(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

// A one-rank job of the tiny model.
inline constexpr char kTinySpec[] =
    "name: demo\n"
    "model: {preset: tiny}\n"
    "training: {max_steps: 10}\n"
    "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";

class ControllerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
            std::to_string(getpid()) + ".db";
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
    options_.heartbeat_check_ms = 20;
  }
  void TearDown() override {
    if (controller_) controller_->Stop();
    controller_.reset();
    reader_.reset();
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
  }

  // Opens the store at path_ and starts a controller with options_.
  void StartController() {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    if (with_reader_) {
      absl::StatusOr<std::unique_ptr<Store>> reader = Store::OpenReader(path_);
      ASSERT_TRUE(reader.ok()) << reader.status();
      reader_ = std::move(*reader);
    }
    options_.store_reader = reader_.get();
    metrics_ = std::make_unique<MetricsExposition>();
    const Clock& clock = use_fake_clock_ ? static_cast<const Clock&>(fake_clock_) : clock_;
    controller_ = std::make_unique<Controller>(*store_, clock, *metrics_, options_);
    controller_->Start();
  }
  // Stops the controller and closes the store (a controller restart keeps only the file).
  // The registry goes too: a controller registers its families once per registry.
  void StopController() {
    controller_->Stop();
    controller_.reset();
    reader_.reset();
    store_.reset();
    metrics_.reset();
  }

  v1::Job Submit(const std::string& spec = kTinySpec) {
    v1::SubmitJobRequest req;
    req.set_spec_text(spec);
    v1::SubmitJobResponse resp;
    absl::Status s = controller_->SubmitJob(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.job();
  }
  absl::Status Cancel(const std::string& id) {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::CancelJobResponse resp;
    return controller_->CancelJob(req, &resp);
  }
  absl::Status Register(const std::string& id, int cpu_slots = 2) {
    v1::RegisterNodeRequest req;
    req.mutable_node()->set_id(id);
    req.mutable_node()->mutable_resources()->set_cpu_slots(cpu_slots);
    v1::RegisterNodeResponse resp;
    return controller_->RegisterNode(req, &resp);
  }

  // One heartbeat of `node` that gets the job's rank 0 to launch, then one reporting it running.
  // Returns that heartbeat (to send again, e.g. after a controller restart).
  v1::HeartbeatRequest LaunchRankZero(const v1::Job& job, const std::string& node = "n1") {
    v1::HeartbeatRequest beat;
    beat.set_node_id(node);
    v1::HeartbeatResponse launch;
    EXPECT_TRUE(controller_->Heartbeat(beat, &launch).ok());
    EXPECT_EQ(launch.ranks_size(), 1);
    v1::RankStatus* st = beat.add_ranks();
    st->set_job_id(job.id());
    st->set_attempt(1);
    st->set_world_rank(0);
    st->set_state(v1::RANK_PROCESS_STATE_RUNNING);
    EXPECT_TRUE(controller_->Heartbeat(beat, &launch).ok());
    return beat;
  }

  std::future<absl::Status> WatchAsync(const std::string& job_id, bool follow,
                                       CollectingSink& sink) {
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    req.set_follow(follow);
    return std::async(std::launch::async,
                      [this, req, &sink] { return controller_->WatchJob(req, sink); });
  }
  // The watch's result; a watch that does not return within 10 s fails the test and is ended
  // by stopping the controller (so the test cannot hang).
  absl::Status Await(std::future<absl::Status>& watch) {
    if (watch.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "WatchJob did not return";
      controller_->Stop();
    }
    return watch.get();
  }
  // The job's events (all jobs' and nodes' for ""), after event id `after`.
  std::vector<v1::Event> Replay(const std::string& job_id, int64_t after = 0) {
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    req.set_after_event_id(after);
    CollectingSink sink;
    absl::Status s = controller_->WatchJob(req, sink);
    EXPECT_TRUE(s.ok()) << s;
    return sink.events();
  }

  std::string path_;
  ControllerOptions options_;
  SystemClock clock_;
  FakeClock fake_clock_;          // the controller's clock instead, with use_fake_clock_
  bool use_fake_clock_ = false;   // set before StartController
  std::unique_ptr<MetricsExposition> metrics_;  // outlives the controller (holds a collector)
  std::unique_ptr<Store> store_;              // outlives the controller
  bool with_reader_ = true;                   // the scrape reads on reader_, as in main.cc
  std::unique_ptr<Store> reader_;             // outlives the controller
  std::unique_ptr<Controller> controller_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_CONTROLLER_TEST_FIXTURE_H_
