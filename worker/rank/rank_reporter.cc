#include "worker/rank/rank_reporter.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "common/logging.h"
#include "worker/comm/inflight.h"

namespace dhp {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kErrorLogInterval(10000);
constexpr milliseconds kFlushOnDestruction(2000);
// The longest pace a controller may ask for (ReportProgressResponse.next_report_ms).
constexpr int kMaxPacedMs = 600000;

// "31 s", or "2.5 s" under 10 s (as comm::Describe).
std::string Seconds(std::chrono::steady_clock::duration d) {
  const double secs = std::max(0.0, std::chrono::duration<double>(d).count());
  char buf[32];
  if (secs < 10) {
    std::snprintf(buf, sizeof(buf), "%.1f s", secs);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld s", static_cast<long long>(secs));
  }
  return buf;
}

// Errors worth retrying soon: the controller is down, restarting or overloaded.
bool Transient(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

}  // namespace

RankReporter::RankReporter(api::DhpClient& client, std::string job_id, int attempt,
                           int world_rank, Options options, api::DhpClient* direct)
    : client_(&client),
      direct_(direct),
      job_id_(std::move(job_id)),
      attempt_(attempt),
      rank_(world_rank),
      options_(options) {
  thread_ = std::thread([this] { Run(); });
}

RankReporter::~RankReporter() {
  Flush(kFlushOnDestruction);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  flushed_.notify_all();
  thread_.join();
}

void RankReporter::StepStarted(int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    step_running_ = true;
    running_step_ = step;
    step_start_ = Clock::now();
    if (first_started_ < 0) first_started_ = step;
  }
  wake_.notify_one();
}

void RankReporter::StepFinished(const StepReport& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = r;
    have_report_ = true;
    ++seq_;
    step_running_ = false;
  }
  wake_.notify_one();
}

void RankReporter::Flush(std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t target = seq_;
  auto done = [&] { return sent_seq_ >= target || finished_ || stopping_; };
  if (done()) return;
  ++flush_waiters_;
  wake_.notify_one();
  flushed_.wait_until(lock, deadline, done);
  --flush_waiters_;
}

std::string RankReporter::WaitingOnLocked(Clock::time_point now) const {
  if (options_.watchdog_ms <= 0) return "";
  const milliseconds watchdog(options_.watchdog_ms);
  const std::optional<comm::InFlightOp> op = comm::InFlightRegistry::Global().Oldest();
  const bool step_stalled = step_running_ && now - step_start_ >= watchdog;
  const bool op_stalled = op.has_value() && now - op->start >= watchdog;
  if (!step_stalled && !op_stalled) return "";
  if (op.has_value()) return comm::Describe(*op, now);
  return "computing step " + std::to_string(running_step_) + " for " + Seconds(now - step_start_);
}

void RankReporter::Run() {
  const milliseconds min_interval(std::max(0, options_.min_interval_ms));
  const bool heartbeats = options_.heartbeat_ms > 0;
  const milliseconds heartbeat(std::max(1, options_.heartbeat_ms));
  const bool watchdog_on = options_.watchdog_ms > 0;
  const milliseconds watchdog(std::max(1, options_.watchdog_ms));
  // After a failed attempt (controller down), the newest state is retried this often.
  const milliseconds retry = std::max(min_interval, milliseconds(500));
  // Collectives that stall between steps are noticed within this.
  const milliseconds poll = watchdog_on
                                ? std::clamp(watchdog / 4, milliseconds(20), milliseconds(1000))
                                : milliseconds(1000);

  // The controller's ReportProgressResponse.next_report_ms: no step report nor idle re-send
  // before last_attempt + paced (a stall report and a flush go out at once).
  milliseconds paced(0);
  bool attempted = false;  // an RPC was made (last_attempt is valid)
  Clock::time_point last_attempt;
  bool last_failed = false;
  bool stall_logged = false;  // the current stall has been logged (at last_stall_log)
  Clock::time_point last_stall_log;
  int64_t failures = 0;  // consecutive failed attempts
  bool error_logged = false;
  Clock::time_point last_error_log;

  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const Clock::time_point now = Clock::now();
    const std::string waiting_on = WaitingOnLocked(now);
    bool send = false;
    if (waiting_on.empty()) {
      stall_logged = false;
    } else if (!stall_logged || now - last_stall_log >= watchdog) {
      std::string where = step_running_ ? ", step " + std::to_string(running_step_) +
                                              " running for " + Seconds(now - step_start_)
                                        : ", between steps";
      DHP_LOG(WARNING) << "watchdog: rank " << rank_ << " of job " << job_id_ << " (attempt "
                       << attempt_ << ")" << where << ": " << waiting_on;
      stall_logged = true;
      last_stall_log = now;
      send = true;
    }
    const bool pending = sent_seq_ != seq_;
    Clock::time_point next = now + poll;
    if (!finished_) {
      if (!attempted || heartbeats) {
        const Clock::time_point beat_at =
            attempted ? last_attempt + std::max(heartbeat, paced) : now;
        if (now >= beat_at) send = true;
        next = std::min(next, beat_at);
      }
      if (pending) {
        const Clock::time_point step_at =
            !attempted ? now
            : last_failed ? last_attempt + std::max(retry, paced)
            : flush_waiters_ > 0 ? now
                                 : last_attempt + std::max(min_interval, paced);
        if (now >= step_at) send = true;
        next = std::min(next, step_at);
      }
    } else {
      send = false;
    }
    if (step_running_ && watchdog_on) {
      const Clock::time_point stall_at =
          stall_logged ? last_stall_log + watchdog : step_start_ + watchdog;
      next = std::min(next, stall_at);
    }
    if (!send) {
      wake_.wait_until(lock, std::max(next, now + milliseconds(1)));
      continue;
    }

    v1::ReportProgressRequest req;
    req.set_job_id(job_id_);
    req.set_attempt(attempt_);
    req.set_rank(rank_);
    if (have_report_) {
      req.set_step(latest_.step);
      req.set_loss(latest_.loss);
      req.set_total_steps(latest_.total_steps);
      req.set_tokens_per_second(latest_.tokens_per_second);
      req.set_step_seconds(latest_.step_seconds);
      for (const auto& [name, value] : latest_.metrics) (*req.mutable_metrics())[name] = value;
    } else {
      // Nothing finished yet: the steps before the first one started are done.
      req.set_step(std::max<int64_t>(0, first_started_ - 1));
      req.set_loss(NAN);
    }
    req.set_waiting_on(waiting_on);
    const int64_t seq = seq_;

    lock.unlock();
    absl::StatusOr<v1::ReportProgressResponse> resp = client_->ReportProgress(req);
    if (resp.status().code() == absl::StatusCode::kUnimplemented && direct_ != nullptr &&
        client_ != direct_) {
      DHP_LOG(INFO) << "rank " << rank_ << ": " << client_->target() << " relays no progress ("
                    << resp.status().message() << "); reporting to " << direct_->target();
      client_ = direct_;
      resp = client_->ReportProgress(req);
    }
    lock.lock();

    attempted = true;
    last_attempt = Clock::now();
    if (resp.ok()) {
      sent_seq_ = std::max(sent_seq_, seq);
      last_failed = false;
      if (failures > 0) {
        DHP_LOG(INFO) << "rank " << rank_ << ": the controller at " << client_->target()
                      << " answers progress reports again (after " << failures
                      << " failed attempts)";
      }
      failures = 0;
      paced = milliseconds(std::clamp(resp->next_report_ms(), 0, kMaxPacedMs));
      if (resp->checkpoint() && resp->checkpoint_at_step() > checkpoint_at_.load()) {
        checkpoint_at_ = resp->checkpoint_at_step();
        DHP_LOG(INFO) << "rank " << rank_ << ": the controller asks for a checkpoint at step "
                      << resp->checkpoint_at_step() << " or the first step boundary after it";
      }
      if (resp->preempt() && !preempt_requested_.exchange(true)) {
        DHP_LOG(INFO) << "rank " << rank_ << ": the controller asks to checkpoint and stop: "
                      << resp->preempt_reason();
      }
      if (resp->stop() && !stop_requested_.exchange(true)) {
        DHP_LOG(INFO) << "rank " << rank_ << ": the controller asks job " << job_id_
                      << " (attempt " << attempt_ << ") to stop";
      }
    } else if (resp.status().code() == absl::StatusCode::kFailedPrecondition ||
               resp.status().code() == absl::StatusCode::kNotFound) {
      finished_ = true;
      stop_requested_ = true;
      DHP_LOG(WARNING) << "rank " << rank_ << ": stopping progress reports and asking to stop: "
                       << resp.status();
    } else {
      // Transient: retried soon. Otherwise: not retried before the next step or heartbeat.
      last_failed = Transient(resp.status());
      if (!last_failed) sent_seq_ = std::max(sent_seq_, seq);
      ++failures;
      if (!error_logged || last_attempt - last_error_log >= kErrorLogInterval) {
        DHP_LOG(WARNING) << "rank " << rank_ << ": progress report failed (training goes on; "
                         << failures << " consecutive failures, messages at most every "
                         << kErrorLogInterval.count() / 1000 << " s): " << resp.status();
        last_error_log = last_attempt;
        error_logged = true;
      }
    }
    flushed_.notify_all();
  }
}

}  // namespace dhp
