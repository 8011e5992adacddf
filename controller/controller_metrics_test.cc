// The controller's own /metrics: how long its loop is held (tick phases, loop lag), and a
// scrape that reads the store off the loop and computes the placed runs' rows in slices.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "controller/controller_test_fixture.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using namespace std::chrono_literals;

class ControllerMetricsTest : public ControllerFixture {
 protected:
  // The value of the sample `name` (with its labels) in `text`; -1 when absent.
  static double Sample(const std::string& text, const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size() + 2));
  }
  static std::string PhaseCount(const std::string& phase) {
    return "dhp_controller_tick_seconds_count{phase=\"" + phase + "\"}";
  }
  // Scrapes until every phase has been observed (the fixture checks every 20 ms and persists
  // every 100 ms: within 5 s each has been), and expects each.
  std::string ScrapeUntilObserved(const std::vector<std::string>& phases) {
    std::string text;
    for (int i = 0; i < 250; ++i) {
      text = controller_->MetricsText();
      bool all = true;
      for (const std::string& p : phases) all = all && Sample(text, PhaseCount(p)) >= 1;
      if (all) break;
      std::this_thread::sleep_for(20ms);
    }
    for (const std::string& p : phases) {
      EXPECT_GE(Sample(text, PhaseCount(p)), 1) << p << "\n" << text;
    }
    return text;
  }
};

const std::vector<std::string> kPeriodicPhases = {"nodes", "node_events", "stalls",
                                                  "schedule", "beats", "progress"};

TEST_F(ControllerMetricsTest, TheScrapeReadsTheStoreOffTheLoop) {
  StartController();
  std::vector<std::string> phases = kPeriodicPhases;
  phases.insert(phases.end(), {"metrics_counts", "metrics_nodes", "metrics_compute"});
  const std::string text = ScrapeUntilObserved(phases);
  EXPECT_EQ(text.find("phase=\"metrics_read\""), std::string::npos) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE dhp_controller_tick_seconds histogram")) << text;
}

TEST_F(ControllerMetricsTest, WithoutAReaderTheScrapeTimesItsReadOnTheLoop) {
  with_reader_ = false;
  StartController();
  std::vector<std::string> phases = kPeriodicPhases;
  phases.insert(phases.end(), {"metrics_counts", "metrics_nodes", "metrics_read",
                                  "metrics_compute"});
  ScrapeUntilObserved(phases);
  Submit();  // the store's rows are read all the same
  EXPECT_TRUE(HasLine(controller_->MetricsText(), "dhp_jobs{state=\"QUEUED\"} 1"));
}

// With one run (four nodes) per slice, a scrape of three placed jobs on five nodes visits the
// loop three times for the runs and twice for the nodes, and the rows are those of all.
// The store's files are sized at each scrape, and the WAL checkpointer's holds have their
// histogram (the holds themselves: wal_checkpointer_test.cc).
TEST_F(ControllerMetricsTest, TheStoreFilesAndTheWalHoldsAreExported) {
  StartController();
  const std::string text = controller_->MetricsText();
  // The schema's ~20 pages: in the database file, or still in the WAL.
  const double db = Sample(text, "dhp_store_file_bytes{file=\"db\"}");
  const double wal = Sample(text, "dhp_store_file_bytes{file=\"wal\"}");
  EXPECT_GE(db, 4096) << text;
  EXPECT_GT(db + std::max(wal, 0.0), 20 * 4096) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE dhp_store_wal_hold_seconds histogram")) << text;
  EXPECT_EQ(Sample(text, "dhp_store_wal_hold_seconds_count{kind=\"restart\"}"), 0) << text;
  EXPECT_GE(Sample(text, "dhp_store_wal_hold_seconds_count{kind=\"truncate\"}"), 0) << text;
}

TEST_F(ControllerMetricsTest, NodesAndPlacedRunsAreReadASliceAtATime) {
  options_.metrics_runs_per_slice = 1;
  StartController();
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(Register("n" + std::to_string(i), 4).ok());
  std::vector<v1::Job> jobs = {Submit(), Submit(), Submit()};
  const std::string compute = PhaseCount("metrics_compute");
  const std::string nodes = PhaseCount("metrics_nodes");
  const std::string before = controller_->MetricsText();
  const std::string text = controller_->MetricsText();
  EXPECT_EQ(Sample(text, compute) - Sample(before, compute), 3) << text;
  EXPECT_EQ(Sample(text, nodes) - Sample(before, nodes), 2) << text;
  for (const v1::Job& job : jobs) {
    EXPECT_TRUE(HasLine(text, "dhp_job_state{job=\"" + job.id() + "\",state=\"SCHEDULED\"} 1"))
        << text;
    EXPECT_TRUE(HasLine(text, "dhp_job_restarts{job=\"" + job.id() + "\"} 0")) << text;
  }
  double used = 0;
  for (int i = 1; i <= 5; ++i) {
    const std::string node = "n" + std::to_string(i);
    EXPECT_EQ(Sample(text, "dhp_node_slots{node=\"" + node + "\",kind=\"total\"}"), 4) << node;
    used += Sample(text, "dhp_node_slots{node=\"" + node + "\",kind=\"used\"}");
  }
  EXPECT_EQ(used, 3) << text;
  EXPECT_TRUE(HasLine(text, "dhp_slots{kind=\"used\"} 3")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_nodes{state=\"READY\"} 5")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_jobs{state=\"SCHEDULED\"} 3")) << text;
}

// The per-rank families go once more ranks are placed than metrics_rank_series_max_ranks; the
// jobs' rows stay.
TEST_F(ControllerMetricsTest, ThePerRankSeriesStopAboveTheirLimit) {
  options_.metrics_rank_series_max_ranks = 2;
  StartController();
  v1::RegisterNodeRequest node;
  node.mutable_node()->set_id("n1");
  node.mutable_node()->mutable_resources()->set_cpu_slots(4);
  node.mutable_node()->mutable_resources()->set_memory_bytes(int64_t{8} << 30);  // 2 GiB a slot
  v1::RegisterNodeResponse registered;
  ASSERT_TRUE(controller_->RegisterNode(node, &registered).ok());
  std::vector<v1::Job> jobs = {Submit(), Submit()};
  const auto capacity = [](const v1::Job& job) {
    return "dhp_rank_memory_capacity_bytes{job=\"" + job.id() + "\",rank=\"0\"}";
  };
  std::string text = controller_->MetricsText();
  EXPECT_TRUE(HasLine(text, "dhp_metrics_rank_series 1")) << text;
  for (const v1::Job& job : jobs) EXPECT_EQ(Sample(text, capacity(job)), double(int64_t{2} << 30)) << text;

  jobs.push_back(Submit());  // 3 ranks placed
  text = controller_->MetricsText();
  EXPECT_TRUE(HasLine(text, "dhp_slots{kind=\"used\"} 3")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_metrics_rank_series 0")) << text;
  EXPECT_EQ(text.find("\ndhp_rank_memory_capacity_bytes{"), std::string::npos) << text;
  for (const v1::Job& job : jobs) {
    EXPECT_TRUE(HasLine(text, "dhp_job_restarts{job=\"" + job.id() + "\"} 0")) << text;
  }
}

// Whatever holds the loop shows in dhp_controller_loop_lag_seconds, and in the cause that
// held it: a call that runs 300 ms on the loop makes the probe (due every 50-150 ms) fire late
// by at least 150 ms, and that lag is the calls', not the ticks' or unrecorded.
TEST_F(ControllerMetricsTest, ALoopHeldLongShowsInTheLagHistogramUnderItsCause) {
  StartController();
  auto sample = [&](const std::string& name) { return Sample(controller_->MetricsText(), name); };
  auto late = [&](const std::string& family, const std::string& labels) {
    const std::string text = controller_->MetricsText();
    const std::string sep = labels.empty() ? "" : ",";
    return Sample(text, family + "_count" + (labels.empty() ? "" : "{" + labels + "}")) -
           Sample(text, family + "_bucket{" + labels + sep + "le=\"0.05\"}");
  };
  const std::string lag = "dhp_controller_loop_lag_seconds";
  const std::string cause = "dhp_controller_loop_lag_cause_seconds";
  for (int i = 0; i < 100 && sample(lag + "_count") < 3; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GE(sample(lag + "_count"), 3);
  const double late_before = late(lag, "");
  const double calls_before = late(cause, "cause=\"calls\"");
  const std::vector<std::string> others = {"check", "persist", "scrape", "other"};
  std::vector<double> others_before;
  for (const std::string& o : others) others_before.push_back(late(cause, "cause=\"" + o + "\""));
  const double busy_before =
      sample("dhp_controller_loop_busy_seconds_total{work=\"calls\"}");
  std::promise<absl::Status> done;
  controller_->Dispatch(
      [] {
        std::this_thread::sleep_for(300ms);
        return absl::OkStatus();
      },
      [&done](const absl::Status& s) { done.set_value(s); }, api::Lane::kUser);
  ASSERT_TRUE(done.get_future().get().ok());
  double lag_late = 0;
  for (int i = 0; i < 100 && lag_late < 1; ++i) {
    lag_late = late(lag, "") - late_before;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_GE(lag_late, 1);
  EXPECT_GE(late(cause, "cause=\"calls\"") - calls_before, 1);
  for (size_t i = 0; i < others.size(); ++i) {  // an idle controller's ticks take microseconds
    EXPECT_EQ(late(cause, "cause=\"" + others[i] + "\"") - others_before[i], 0) << others[i];
  }
  EXPECT_GE(sample("dhp_controller_loop_busy_seconds_total{work=\"calls\"}") - busy_before,
            0.3);
}


// A loop that is never idle but never held long (a backlog of short calls, as while 10,000
// agents register) shows in dhp_controller_loop_lag_seconds as the wait it causes a call, not
// more: each probe waits as a call posted then does, whatever the probes before it waited.
TEST_F(ControllerMetricsTest, ASteadyBacklogShowsInTheLagAsTheWaitItCauses) {
  StartController();
  const std::string lag = "dhp_controller_loop_lag_seconds";
  // Probes that waited longer than `le` seconds, in a page of /metrics.
  auto over = [&](const std::string& text, const char* le) {
    return Sample(text, lag + "_count") -
           Sample(text, lag + "_bucket{le=\"" + std::string(le) + "\"}");
  };
  const std::string before = controller_->MetricsText();
  // Calls of 2 ms, ~100 of them queued at any time: each waits ~200 ms for the loop, longer
  // than the probes' gaps.
  std::atomic<int> queued{0};
  std::atomic<int64_t> longest_wait_us{0};
  const auto until = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < until) {
    if (queued.load() >= 100) {
      std::this_thread::sleep_for(200us);
      continue;
    }
    ++queued;
    const auto dispatched = std::chrono::steady_clock::now();
    controller_->Dispatch(
        [&, dispatched] {
          const int64_t waited = std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::steady_clock::now() - dispatched)
                                     .count();
          int64_t seen = longest_wait_us.load();
          while (waited > seen && !longest_wait_us.compare_exchange_weak(seen, waited)) {
          }
          std::this_thread::sleep_for(2ms);
          return absl::OkStatus();
        },
        [&](const absl::Status&) { --queued; }, api::Lane::kUser);
  }
  while (queued.load() > 0) std::this_thread::sleep_for(1ms);
  const double longest = static_cast<double>(longest_wait_us.load()) / 1e6;
  ASSERT_LT(longest, 0.9) << "the backlog itself is longer than meant";
  // No probe waited much longer than the longest call: the first bucket past it and 0.1 s.
  const char* le = "1";
  for (const char* b : {"0.25", "0.5"}) {
    if (std::stod(b) >= longest + 0.1) {
      le = b;
      break;
    }
  }
  const std::string after = controller_->MetricsText();
  EXPECT_GE(Sample(after, lag + "_count") - Sample(before, lag + "_count"), 5);  // ~15 probes
  EXPECT_EQ(over(after, le) - over(before, le), 0)
      << "calls waited at most " << longest << " s\n" << after;
}

}  // namespace
}  // namespace dhp::controller
