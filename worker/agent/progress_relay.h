// ProgressRelay: the agent carries its ranks' progress reports to the controller in its
// heartbeats (HeartbeatRequest.progress), so that the controller takes one call per node every
// heartbeat interval instead of one per rank report, and keeps one connection per node instead
// of one per rank (90,000 -> 10,000 at 10,000 nodes of 8 GPUs).
//
// A rank's RankReporter sends ReportProgress to the agent (ProgressServer, on a Unix socket).
// Accept keeps it as the rank's newest report and answers at once with what the controller last
// answered for that rank (an empty response before that), so the rank's flags (stop,
// checkpoint, preempt) and pace reach it one heartbeat late. Only the newest report of a rank
// is carried: the controller's figures are the newest, as with direct reports. A controller
// error for the rank is answered to its next report: FAILED_PRECONDITION and NOT_FOUND (the
// attempt is over) to every later one, others once.
//
// A controller that answers no ProgressAnswer for the reports it was sent predates relaying:
// from then on Accept answers UNIMPLEMENTED, and RankReporter reports to the controller itself.
//
// Thread-safety: every method may be called from any thread.
#ifndef DHP_WORKER_AGENT_PROGRESS_RELAY_H_
#define DHP_WORKER_AGENT_PROGRESS_RELAY_H_

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dhp/v1/service.pb.h"
#include "worker/agent/rank_launcher.h"

namespace dhp::worker {

// The most reports one heartbeat may carry: the controller refuses a heartbeat with more
// (HeartbeatRequest.progress in proto/dhp/v1/service.proto).
inline constexpr int kMaxRelayedPerHeartbeat = 1024;

class ProgressRelay {
 public:
  // At most `max_ranks` ranks are tracked at once (RESOURCE_EXHAUSTED beyond): a node runs one
  // rank per GPU or CPU slot, so only a stray local client could reach it.
  explicit ProgressRelay(size_t max_ranks = 4096) : max_ranks_(max_ranks) {}

  // A rank's report: kept as its newest, answered as described above.
  absl::StatusOr<v1::ReportProgressResponse> Accept(const v1::ReportProgressRequest& req);
  // Moves the reports received since the last call into hb->progress, at most `max` of them,
  // and returns how many. The rest wait for the next heartbeat, which starts after the last
  // rank taken, so that no rank waits behind others that report at every heartbeat.
  int TakeInto(v1::HeartbeatRequest* hb, int max = kMaxRelayedPerHeartbeat);
  // The heartbeat carrying hb.progress was answered OK: each answer is kept for its rank.
  void Answered(const v1::HeartbeatRequest& hb, const v1::HeartbeatResponse& resp);
  // The heartbeat failed: its reports are pending again, except where a rank reported since.
  void Failed(const v1::HeartbeatRequest& hb);
  // Forgets every rank not in `live` (those the node runs or was just told to run).
  void Retain(const std::set<RankKey>& live);

  // The controller took no relayed reports (see above).
  bool unsupported() const;
  size_t ranks() const;

 private:
  struct Entry {
    std::optional<v1::ReportProgressRequest> pending;  // not yet taken into a heartbeat
    v1::ReportProgressResponse answer;  // the controller's newest answer for the rank
    absl::Status error;                 // its newest error, until answered to the rank
  };
  static RankKey KeyOf(const v1::ReportProgressRequest& req) {
    return {req.job_id(), req.attempt(), req.rank()};
  }

  const size_t max_ranks_;
  mutable std::mutex mu_;  // guards everything below
  std::map<RankKey, Entry> entries_;
  std::optional<RankKey> last_taken_;  // where the next TakeInto starts (after it)
  bool unsupported_ = false;
};

}  // namespace dhp::worker

#endif  // DHP_WORKER_AGENT_PROGRESS_RELAY_H_
