#include "worker/rank/rank_control.h"

#include <thread>

namespace dhp {

absl::StatusOr<JobDescription> FetchJobDescription(api::DhpClient& client,
                                                   const std::string& job_id, int attempt,
                                                   std::chrono::milliseconds budget) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  absl::StatusOr<v1::GetJobResponse> job;
  absl::Status s = RetryWhileUnavailable(
      [&] {
        job = client.GetJob(req);
        return job.status();
      },
      budget, [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); });
  if (!s.ok()) return s;
  return DescribeJobAttempt(*job, attempt);
}

void ControllerRankControl::StepFinished(const RankStepProgress& p) {
  StepReport r;
  r.step = p.step;
  r.loss = p.loss;
  r.total_steps = p.total_steps;
  r.tokens_per_second = p.tokens_per_second;
  r.step_seconds = p.step_seconds;
  r.metrics = p.metrics;
  reporter_.StepFinished(r);
}

absl::Status ControllerRankControl::ReportCheckpoint(const v1::ReportCheckpointRequest& request) {
  return client_.ReportCheckpoint(request).status();
}

absl::Status ControllerRankControl::RejectCheckpoint(const v1::RejectCheckpointRequest& request) {
  return client_.RejectCheckpoint(request).status();
}

}  // namespace dhp
