#include "controller/job_state_machine.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/proto_enum.h"

namespace dhp::controller {
namespace {

using v1::JobState;

// The legal successors of `from`, in the order error messages list them.
std::vector<JobState> Successors(JobState from) {
  switch (from) {
    case v1::JOB_STATE_QUEUED:
      return {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_CANCELLED, v1::JOB_STATE_FAILED};
    case v1::JOB_STATE_SCHEDULED:
      // QUEUED: the placement was undone (a node was lost before launch).
      // RESTARTING: a rank failed before every rank was seen running.
      return {v1::JOB_STATE_STARTING, v1::JOB_STATE_CANCELLING, v1::JOB_STATE_FAILED,
              v1::JOB_STATE_QUEUED, v1::JOB_STATE_RESTARTING};
    case v1::JOB_STATE_STARTING:
      return {v1::JOB_STATE_RUNNING, v1::JOB_STATE_CANCELLING, v1::JOB_STATE_FAILED,
              v1::JOB_STATE_RESTARTING};
    case v1::JOB_STATE_RUNNING:
      return {v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLING,
              v1::JOB_STATE_RESTARTING};
    case v1::JOB_STATE_RESTARTING:
      return {v1::JOB_STATE_QUEUED, v1::JOB_STATE_CANCELLING, v1::JOB_STATE_FAILED};
    case v1::JOB_STATE_CANCELLING:
      return {v1::JOB_STATE_CANCELLED, v1::JOB_STATE_FAILED};
    case v1::JOB_STATE_CANCELLED:  // resume
    case v1::JOB_STATE_FAILED:     // resume
      return {v1::JOB_STATE_QUEUED};
    case v1::JOB_STATE_SUCCEEDED:
    default:  // UNSPECIFIED, and values this build does not know
      return {};
  }
}

std::string Name(JobState state) { return ShortName(state); }

}  // namespace

absl::Status CheckJobTransition(JobState from, JobState to) {
  const std::vector<JobState> allowed = Successors(from);
  for (JobState next : allowed) {
    if (next == to) return absl::OkStatus();
  }
  const std::string prefix =
      absl::StrCat("job cannot go from ", Name(from), " to ", Name(to), ": ");
  if (from == to) {
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, "it is already ", Name(from)));
  }
  if (allowed.empty()) {
    if (from == v1::JOB_STATE_SUCCEEDED) {
      return absl::FailedPreconditionError(absl::StrCat(prefix, "SUCCEEDED is final"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(prefix, Name(from), " is not a job state; a stored job never has it"));
  }
  std::string list;
  for (JobState next : allowed) absl::StrAppend(&list, list.empty() ? "" : ", ", Name(next));
  return absl::FailedPreconditionError(
      absl::StrCat(prefix, "allowed from ", Name(from), ": ", list));
}

bool IsTerminal(JobState state) {
  return state == v1::JOB_STATE_CANCELLED || state == v1::JOB_STATE_SUCCEEDED ||
         state == v1::JOB_STATE_FAILED;
}

absl::Status CancelTarget(JobState from, JobState* to) {
  switch (from) {
    case v1::JOB_STATE_QUEUED:
      *to = v1::JOB_STATE_CANCELLED;  // nothing runs yet
      return absl::OkStatus();
    case v1::JOB_STATE_SCHEDULED:
    case v1::JOB_STATE_STARTING:
    case v1::JOB_STATE_RUNNING:
    case v1::JOB_STATE_RESTARTING:
      *to = v1::JOB_STATE_CANCELLING;  // ranks may exist and must be stopped first
      return absl::OkStatus();
    case v1::JOB_STATE_CANCELLING:
      return absl::FailedPreconditionError("job is already being cancelled");
    case v1::JOB_STATE_CANCELLED:
    case v1::JOB_STATE_SUCCEEDED:
    case v1::JOB_STATE_FAILED:
      return absl::FailedPreconditionError(
          absl::StrCat("job is already ", Name(from), "; there is nothing to cancel"));
    default:
      return absl::FailedPreconditionError(
          absl::StrCat("job in state ", Name(from), " cannot be cancelled"));
  }
}

absl::Status CheckResumable(JobState from) {
  if (from == v1::JOB_STATE_CANCELLED || from == v1::JOB_STATE_FAILED) return absl::OkStatus();
  if (from == v1::JOB_STATE_SUCCEEDED) {
    return absl::FailedPreconditionError(
        "only CANCELLED or FAILED jobs can be resumed; job is SUCCEEDED: it completed, so "
        "submit a new job to train further");
  }
  return absl::FailedPreconditionError(
      absl::StrCat("only CANCELLED or FAILED jobs can be resumed; job is ", Name(from)));
}

}  // namespace dhp::controller
