// RankReporter: tells the controller how a rank's training goes (ReportProgress), without ever
// making the training thread wait for the network, and hosts the rank's watchdog.
//
// The training thread calls StepStarted / StepFinished (a lock and a copy: microseconds); a
// background thread sends ReportProgressRequest{job_id, attempt, rank, step, loss, total_steps,
// tokens_per_second, step_seconds, metrics, waiting_on}:
//  - the newest finished step, at most once per `min_interval_ms`; intermediate steps may be
//    skipped, the newest one is always sent eventually (Flush sends it at once);
//  - when nothing new happened for `heartbeat_ms`, the newest state again, so that the
//    controller knows the rank is alive (also before the first step has finished: step is then
//    the step before the first one started, or 0, and loss NaN);
//  - watchdog: once the current step has run for `watchdog_ms` (or, between steps, a collective
//    has been in flight that long), `waiting_on` names the oldest collective in flight
//    (comm::InFlightRegistry::Global()), e.g. "all_reduce on group text.tp0 (call 57) for 31 s",
//    or "computing step 12 for 31 s" when none is; the report goes out at once and the same line
//    is logged to stderr once per watchdog period while the stall lasts.
// The controller may slow this down: after a response with next_report_ms = N (a large cluster),
// neither step reports, idle re-sends nor retries after a failure go out sooner than N ms after
// the last attempt (at most 10 min); stall reports and Flush are not held back.
// A loss of NaN means "no loss on this rank" (it hosts no text role) and is sent as NaN (proto3
// doubles carry NaN; the controller ignores it).
//
// Errors never reach the training thread. Transient ones (controller down or restarting:
// UNAVAILABLE, DEADLINE_EXCEEDED, ...) are logged at most once per 10 s and retried; the newest
// state is re-sent once the controller answers again. FAILED_PRECONDITION (this attempt is no
// longer current) and NOT_FOUND (no such job) set stop_requested() and end reporting, as does a
// response with stop=true (reporting goes on then, so the final steps still arrive). A response
// with checkpoint=true (CheckpointJob) raises checkpoint_requested_at() to its step. Other errors
// (e.g. INVALID_ARGUMENT) are logged and not retried until the next step or heartbeat.
//
// Reporting through the agent (dhp-rank --progress-via): `client` is the agent's socket and
// `direct` the controller. The agent answers at once and carries the report in its next
// heartbeat; when it answers UNIMPLEMENTED (its controller takes no relayed reports) the
// reporter switches to `direct` for good and sends again at once.
//
// The RPCs use the client's deadline (DhpClient's default_timeout_ms): the destructor waits for
// an RPC in progress, so give the reporter a client with a short deadline (a few seconds).
//
// Thread-safety: StepStarted, StepFinished, stop_requested and Flush may be called from any
// thread (normally the training thread). The client is borrowed and must outlive this.
#ifndef DHP_WORKER_RANK_RANK_REPORTER_H_
#define DHP_WORKER_RANK_RANK_REPORTER_H_

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "api/client.h"

namespace dhp {

struct StepReport {
  int64_t step = 0;  // the step that just finished
  double loss = NAN;  // NaN: this rank has no loss (no text role)
  int64_t total_steps = 0;
  double tokens_per_second = 0;
  double step_seconds = 0;
  std::map<std::string, double> metrics;
};

class RankReporter {
 public:
  struct Options {
    int min_interval_ms = 200;  // at most one step report per interval
    int watchdog_ms = 30000;    // a step running longer is reported stalled; <= 0: no watchdog
    int heartbeat_ms = 2000;    // re-send the newest state when idle this long; <= 0: never
  };

  RankReporter(api::DhpClient& client, std::string job_id, int attempt, int world_rank,
               Options options, api::DhpClient* direct = nullptr);
  // Flushes (best effort, at most 2 s), then stops the thread.
  ~RankReporter();
  RankReporter(const RankReporter&) = delete;
  RankReporter& operator=(const RankReporter&) = delete;

  // Training thread; cheap.
  void StepStarted(int64_t step);
  // Training thread; cheap, never blocks on the network.
  void StepFinished(const StepReport& r);
  // The controller answered stop=true, or the attempt is no longer current / the job is gone.
  bool stop_requested() const { return stop_requested_.load(); }
  // The newest step at (or after) which the controller asked for a checkpoint (checkpoint now);
  // -1 when it never asked.
  int64_t checkpoint_requested_at() const { return checkpoint_at_.load(); }
  // The controller answered preempt=true (a drain of a node holding the job's ranks):
  // checkpoint at the next step boundary and stop, as for a SIGTERM.
  bool preempt_requested() const { return preempt_requested_.load(); }
  // Waits until the newest finished step has been delivered (sent and answered), reporting has
  // ended, or `timeout` passed.
  void Flush(std::chrono::milliseconds timeout);

 private:
  using Clock = std::chrono::steady_clock;

  void Run();
  // What to put into waiting_on now ("" when not stalled). Requires mu_.
  std::string WaitingOnLocked(Clock::time_point now) const;

  api::DhpClient* client_;  // the Run thread's; becomes direct_ after UNIMPLEMENTED
  api::DhpClient* const direct_;
  const std::string job_id_;
  const int attempt_;
  const int rank_;
  const Options options_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<int64_t> checkpoint_at_{-1};
  std::atomic<bool> preempt_requested_{false};

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;     // the sender: something changed
  std::condition_variable flushed_;  // Flush callers: sent_seq_ moved or reporting ended
  bool have_report_ = false;  // latest_ holds a finished step
  StepReport latest_;
  int64_t seq_ = 0;       // StepFinished calls so far
  int64_t sent_seq_ = 0;  // seq_ of the newest delivered report
  bool step_running_ = false;
  int64_t running_step_ = -1;
  int64_t first_started_ = -1;
  Clock::time_point step_start_;
  int flush_waiters_ = 0;
  bool finished_ = false;  // FAILED_PRECONDITION / NOT_FOUND: nothing more to send
  bool stopping_ = false;  // the destructor asks the thread to end

  std::thread thread_;  // last: starts after everything above is initialised
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_RANK_REPORTER_H_
