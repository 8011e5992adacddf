// The controller side of a job rank (job_rank.h) over gRPC: GetJob with retries, and the
// RankControl that dhp-rank uses — progress, heartbeats, the watchdog and the stop flag through
// RankReporter, checkpoint reports and rejections through DhpClient.
//
// Thread-safety: ControllerRankControl is used by the rank's training thread; the reporter and
// the client are borrowed (both thread-safe) and must outlive it.
#ifndef DHP_WORKER_RANK_RANK_CONTROL_H_
#define DHP_WORKER_RANK_RANK_CONTROL_H_

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "api/client.h"
#include "worker/rank/job_rank.h"
#include "worker/rank/preemption.h"
#include "worker/rank/rank_reporter.h"

namespace dhp {

// GetJob(job_id), retried while the controller is UNAVAILABLE or DEADLINE_EXCEEDED for up to
// `budget`, then DescribeJobAttempt(attempt).
absl::StatusOr<JobDescription> FetchJobDescription(api::DhpClient& client,
                                                   const std::string& job_id, int attempt,
                                                   std::chrono::milliseconds budget);

class ControllerRankControl : public RankControl {
 public:
  ControllerRankControl(api::DhpClient& client, RankReporter& reporter)
      : client_(client), reporter_(reporter) {}

  void StepStarted(int64_t step) override { reporter_.StepStarted(step); }
  void StepFinished(const RankStepProgress& progress) override;
  bool stop_requested() const override { return reporter_.stop_requested(); }
  bool preempt_requested() const override {
    return PreemptionRequested() || reporter_.preempt_requested();
  }
  int64_t checkpoint_requested_at() const override {
    return reporter_.checkpoint_requested_at();
  }
  void Flush(std::chrono::milliseconds timeout) override { reporter_.Flush(timeout); }
  absl::Status ReportCheckpoint(const v1::ReportCheckpointRequest& request) override;
  absl::Status RejectCheckpoint(const v1::RejectCheckpointRequest& request) override;

 private:
  api::DhpClient& client_;
  RankReporter& reporter_;
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_RANK_CONTROL_H_
