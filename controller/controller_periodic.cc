// The controller's periodic work on its loop: the once-a-second check (lost nodes, stalled
// runs), the 25 ms persistence of heartbeat times and step figures, their timing
// (dhp_controller_tick_seconds), and the retention sweep.
#include <pthread.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "common/logging.h"
#include "controller/controller.h"

namespace dhp::controller {
namespace {

// A tick that holds the loop this long is logged with its phases: heartbeats and API calls
// waited that long (the heartbeat aim at 10,000 nodes is p99 <= 50 ms).
constexpr double kSlowTickSeconds = 0.05;
// A lag probe is posted every 50-150 ms, uniformly at random (100 on average).
constexpr int kLagProbeMinMs = 50;
constexpr int kLagProbeMaxMs = 150;

}  // namespace

void Controller::ScheduleRetentionSweep(int delay_ms) {
  retention_timer_.expires_after(std::chrono::milliseconds(delay_ms));
  retention_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    LoopLedger::Span span(ledger_, LoopLedger::kOther);
    constexpr int kBatch = 100;  // jobs per pass: the loop is never held long
    ScheduleRetentionSweep(SweepExpired() >= kBatch ? 10 : options_.retention_sweep_ms);
  });
}

int Controller::SweepExpired() {
  const int64_t cutoff = clock_.NowMicros() - options_.retention_s * 1000000;
  absl::StatusOr<std::vector<std::string>> expired = store_.FinalJobsBefore(cutoff, 100);
  if (!expired.ok()) {
    DHP_LOG(ERROR) << "retention: listing expired jobs: " << expired.status();
    return 0;
  }
  int deleted = 0;
  for (const std::string& job_id : *expired) {
    if (absl::Status s = store_.DeleteJob(job_id); !s.ok()) {
      DHP_LOG(ERROR) << "retention: deleting job " << job_id << ": " << s;
      continue;
    }
    ++deleted;
    if (logs_ != nullptr) {
      files_.Post([this, job_id] {
        if (absl::Status s = logs_->DeleteJob(job_id); !s.ok()) {
          DHP_LOG(WARNING) << "retention: deleting the logs of " << job_id << ": " << s;
        }
      });
    }
  }
  absl::StatusOr<int64_t> node_events = store_.DeleteNodeEventsBefore(cutoff);
  if (!node_events.ok()) DHP_LOG(ERROR) << "retention: node events: " << node_events.status();
  if (deleted > 0 || (node_events.ok() && *node_events > 0)) {
    DHP_LOG(INFO) << "retention: deleted " << deleted << " final job(s) and "
                  << (node_events.ok() ? *node_events : 0) << " node event(s) older than "
                  << options_.retention_s << " s";
  }
  return deleted;
}

void Controller::ScheduleHeartbeatCheck() {
  heartbeat_timer_.expires_after(std::chrono::milliseconds(options_.heartbeat_check_ms));
  heartbeat_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    LoopLedger::Span span(ledger_, LoopLedger::kCheck);
    std::vector<v1::Event> events;
    PhaseTimer timer;
    absl::Status s = nodes_.CheckHeartbeats(&events);
    timer.Lap("nodes");
    if (s.ok()) s = ApplyNodeEvents(events, &events);
    timer.Lap("node_events");
    if (!s.ok()) DHP_LOG(ERROR) << "heartbeat check failed: " << s;
    Settle(events);
    timer.Lap("schedule");
    RecordTick(timer, "once-a-second check of the nodes");
    // The runs in a turn of their own, behind the calls that arrived meanwhile: at 10,000 nodes
    // and runs each half takes a few milliseconds, which a call would otherwise wait for whole.
    boost::asio::post(io_, [this] { CheckRuns(); });
  });
}

void Controller::CheckRuns() {
  if (stopped_) return;
  LoopLedger::Span span(ledger_, LoopLedger::kCheck);
  std::vector<v1::Event> events;
  PhaseTimer timer;
  absl::Status s = supervisor_.CheckStalls(&events);
  timer.Lap("stalls");
  if (!s.ok()) DHP_LOG(ERROR) << "stall check failed: " << s;
  Settle(events);
  timer.Lap("schedule");
  RecordTick(timer, "once-a-second check of the runs");
  ScheduleHeartbeatCheck();
}

void Controller::SchedulePersist() {
  persist_timer_.expires_after(std::chrono::milliseconds(options_.persist_ms));
  persist_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    LoopLedger::Span span(ledger_, LoopLedger::kPersist);
    PhaseTimer timer;
    absl::Status beats = nodes_.PersistDueBeats();
    if (!beats.ok()) {
      DHP_LOG(WARNING) << "writing heartbeat times (kept in memory; written again with each "
                          "node's next due beat): " << beats;
    }
    timer.Lap("beats");
    RecordTick(timer, "write of heartbeat times");
    // The step figures in a turn of their own, behind the calls that arrived meanwhile: the loop
    // is held for one write at a time.
    boost::asio::post(io_, [this] { PersistProgress(); });
  });
}

void Controller::PersistProgress() {
  if (stopped_) return;
  LoopLedger::Span span(ledger_, LoopLedger::kPersist);
  std::vector<v1::Event> events;
  PhaseTimer timer;
  absl::Status progress = supervisor_.SaveProgress(&events);
  if (!progress.ok()) DHP_LOG(ERROR) << "writing step figures: " << progress;
  timer.Lap("progress");
  if (!events.empty()) Settle(events);
  RecordTick(timer, "write of step figures");
  SchedulePersist();
}

void Controller::RunLagProber() {
  pthread_setname_np(pthread_self(), "dhp-lag-probe");
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> gap_ms(kLagProbeMinMs, kLagProbeMaxMs);
  std::unique_lock<std::mutex> lock(lag_prober_mu_);
  while (!lag_prober_cv_.wait_for(lock, std::chrono::milliseconds(gap_ms(random)),
                                  [this] { return stopped_.load(); })) {
    const auto posted = std::chrono::steady_clock::now();
    boost::asio::post(io_, [this, posted] { RecordLag(posted); });
  }
}

void Controller::RecordLag(std::chrono::steady_clock::time_point posted) {
  if (stopped_) return;
  const auto now = std::chrono::steady_clock::now();
  const double lag = std::chrono::duration<double>(now - posted).count();
  loop_lag_seconds_.Observe(lag);
  const LoopLedger::Split split = ledger_.SplitWindow(posted, now);
  for (size_t i = 0; i < split.size(); ++i) lag_cause_seconds_[i]->Observe(split[i]);
  const std::array<double, LoopLedger::kWorkCount> busy = ledger_.TakeBusy();
  for (size_t i = 0; i < busy.size(); ++i) loop_busy_seconds_[i]->Increment(busy[i]);
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  if (lag < kSlowTickSeconds || now_ms - last_lag_warning_ms_ < 1000) return;
  last_lag_warning_ms_ = now_ms;
  std::string causes;
  for (size_t i = 0; i < split.size(); ++i) {
    if (split[i] < 0.0005) continue;
    absl::StrAppend(&causes, causes.empty() ? "" : ", ", LoopLedger::Name(i), " ",
                    static_cast<int>(split[i] * 1000), " ms");
  }
  DHP_LOG(WARNING) << "the loop ran a probe posted " << static_cast<int>(lag * 1000)
                   << " ms earlier (" << causes
                   << "; calls arriving then waited as long; at most one such warning a second)";
}

void Controller::AddLoopLedgerMetrics() {
  auto& causes = metrics_.AddHistogram(
      "dhp_controller_loop_lag_cause_seconds",
      "Each dhp_controller_loop_lag_seconds probe's lag, split by what the loop ran meanwhile: "
      "calls (API calls and heartbeats), check (the once-a-second check), persist (heartbeat "
      "times and step figures written), scrape (a /metrics scrape's visits), other (retention, "
      "exports), unrecorded (none of those: the loop thread waited for a CPU or woke late).");
  for (int i = 0; i <= LoopLedger::kWorkCount; ++i) {
    lag_cause_seconds_.push_back(
        &causes.Add({{"cause", LoopLedger::Name(i)}}, LatencyBuckets()));
  }
  auto& busy = metrics_.AddCounter(
      "dhp_controller_loop_busy_seconds_total",
      "Seconds the controller's event loop spent on each kind of work (the causes of "
      "dhp_controller_loop_lag_cause_seconds but unrecorded), updated with each lag probe.");
  for (int i = 0; i < LoopLedger::kWorkCount; ++i) {
    loop_busy_seconds_.push_back(&busy.Add({{"work", LoopLedger::Name(i)}}));
  }
}

void Controller::RecordTick(const PhaseTimer& timer, const char* what) {
  for (const auto& [phase, seconds] : timer.laps()) {
    tick_seconds_.Add({{"phase", phase}}, LatencyBuckets()).Observe(seconds);
  }
  if (timer.total() >= kSlowTickSeconds) {
    DHP_LOG(WARNING) << "the " << what << " held the loop for " << timer.Describe()
                     << "; heartbeats and API calls waited meanwhile";
  }
}

}  // namespace dhp::controller
