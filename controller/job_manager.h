// JobManager: the job operations of the API (submit, get, list, cancel, resume, progress) as
// transactions on the Store, with every transition checked by the job state machine and
// recorded as an event.
//
// Thread-safety: not thread-safe; the Controller calls it only on its loop thread.
#ifndef DHP_CONTROLLER_JOB_MANAGER_H_
#define DHP_CONTROLLER_JOB_MANAGER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/spec_validate.h"
#include "controller/store.h"
#include "dhp/v1/service.pb.h"

namespace dhp::controller {

// Whether a spec can ever fit the cluster (Supervisor::CheckAdmission); OK or the reason.
using SpecAdmission = std::function<absl::Status(const v1::JobSpec&)>;

// One submission of a batch (JobManager::SubmitAll): a spec that ValidateSubmission returned
// and, once SubmitAll ran, its answer.
struct Submission {
  const v1::JobSpec* spec = nullptr;
  bool dry_run = false;
  std::string owner;
  v1::SubmitJobResponse* resp = nullptr;  // the job as stored (dry run: as it would be)
  absl::Status status;  // not OK on entry: refused already (admission), skipped
  // `spec` came from ValidateSubmission, which checked its UTF-8: the store does not again.
  bool spec_checked = false;
};

class JobManager {
 public:
  JobManager(Store& store, const Clock& clock, SpecOptions spec_options);

  // Each mutating call appends the events it recorded to `events` (with their ids).
  // Submit = ValidateSubmission + SubmitValidated.
  absl::Status Submit(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp,
                      std::vector<v1::Event>* events);
  // Parses and validates the request's spec. Touches no state: thread-safe, so the Controller
  // runs it on the caller's thread (YAML parsing is most of a submit's CPU time).
  absl::StatusOr<v1::JobSpec> ValidateSubmission(const v1::SubmitJobRequest& req) const;
  // Stores a job for a spec that ValidateSubmission returned (SubmitAll of one).
  absl::Status SubmitValidated(const v1::JobSpec& spec, bool dry_run, v1::SubmitJobResponse* resp,
                               std::vector<v1::Event>* events, const std::string& owner = "");
  // Stores the batch's jobs (each QUEUED, with its attempt 1 PENDING and its job.state event)
  // in one transaction: a commit's cost is mostly per transaction (the WAL frames of the pages
  // it changed), and jobs stored together share their pages. If that transaction fails, each
  // job is committed on its own, so that one that cannot be stored fails alone. Jobs get
  // submit_seq in batch order, each above the last one given.
  void SubmitAll(std::vector<Submission>& batch, std::vector<v1::Event>* events);
  // SubmitAll in two steps, for a caller that queues the jobs and decides why they wait before
  // they are stored: PrepareSubmits gives each job its id and submit_seq and answers dry runs;
  // CommitSubmits stores them with `extra` (other jobs' writes) in one transaction. If that
  // fails, each job is committed on its own and `extra` is not: it returns whether `extra` was
  // stored. A job that was not stored has its Submission's status not OK.
  struct PreparedSubmits {
    std::vector<JobWrite> writes;
    std::vector<Submission*> subs;  // writes[i] is subs[i]'s
  };
  PreparedSubmits PrepareSubmits(std::vector<Submission>& batch);
  bool CommitSubmits(PreparedSubmits& prepared, const std::vector<JobWrite>& extra,
                     std::vector<v1::Event>* events);
  absl::Status Get(const v1::GetJobRequest& req, v1::GetJobResponse* resp);
  absl::Status List(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp);
  absl::Status Cancel(const v1::CancelJobRequest& req, v1::CancelJobResponse* resp,
                      std::vector<v1::Event>* events);
  // A new attempt from the newest COMPLETE checkpoint. The request's layout fields (vision and
  // text degree, data_parallel_size, placement) replace the stored spec's: the changed spec is
  // normalised and validated as a submitted one (INVALID_ARGUMENT "resume: <fields>: ..."; a
  // micro-batch that was the replica's whole share stays the whole share on a new dp) and,
  // when its layout differs, passed to `admit` (null: not checked); its refusal is returned
  // prefixed the same way. A refused resume writes nothing. Otherwise the new spec is stored
  // with the new run, in one commit, and the reason names both layouts.
  absl::Status Resume(const v1::ResumeJobRequest& req, v1::ResumeJobResponse* resp,
                      std::vector<v1::Event>* events, const SpecAdmission& admit = nullptr);

  // OK when the job exists, has not ended, and `attempt` is its current attempt; NOT_FOUND for
  // an unknown job, FAILED_PRECONDITION naming the job's state once it ended (its rendezvous is
  // over: a wait would never end, a key set would never be dropped), or naming the current
  // attempt for any other attempt.
  absl::Status CheckCurrentAttempt(const std::string& job_id, int attempt);

 private:
  ThreadChecker loop_;  // the controller's loop thread: every entry point checks it
  // Applies the request's layout fields to `spec` (the stored one): "" when none is set or the
  // layout stays the same, else " on layout NEW (was OLD)" for the reason. With a checkpoint to
  // resume from, a change the ranks cannot reshard (comm::CheckReshardable) is refused.
  absl::StatusOr<std::string> Relayout(const v1::ResumeJobRequest& req,
                                       const SpecAdmission& admit, bool has_checkpoint,
                                       v1::JobSpec* spec) const;
  v1::Event MakeEvent(const v1::Job& job, const std::string& type, const std::string& from,
                      const std::string& to, const std::string& reason) const;
  // A new job for `spec` (QUEUED, attempt 1), with no id yet.
  v1::Job NewJob(const v1::JobSpec& spec, const std::string& owner, int64_t now);
  // The write that stores `job` with its first run and its job.state event.
  JobWrite FirstWrite(const v1::Job& job, int64_t now) const;

  Store& store_;
  const Clock& clock_;
  const SpecOptions spec_options_;
  int64_t last_submit_seq_ = 0;  // strictly increasing, so jobs keep their submit order
};

// ListJobs page tokens: opaque to clients ("p" + the sequence number to continue below).
std::string EncodePageToken(int64_t before_seq);
absl::StatusOr<int64_t> DecodePageToken(const std::string& token);

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_JOB_MANAGER_H_
