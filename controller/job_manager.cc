#include "controller/job_manager.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/elastic.h"
#include "common/ids.h"
#include "common/job_layout.h"
#include "common/layout.h"
#include "common/proto_enum.h"
#include "common/proto_utf8.h"
#include "controller/job_events.h"
#include "controller/job_state_machine.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

constexpr int kDefaultPageSize = 50;
constexpr int kMaxPageSize = 1000;

absl::Status RequireJobId(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  return absl::OkStatus();
}

std::string StateName(v1::JobState s) { return ShortName(s); }
std::string RunStateName(v1::RunState s) { return ShortName(s); }

// The layout fields a resume sets, as "text_degree 3, placement separate"; empty: none.
std::string LayoutFields(const v1::ResumeJobRequest& req) {
  std::vector<std::string> set;
  if (req.has_vision_degree()) set.push_back(absl::StrCat("vision_degree ", req.vision_degree()));
  if (req.has_text_degree()) set.push_back(absl::StrCat("text_degree ", req.text_degree()));
  if (req.has_data_parallel_size()) {
    set.push_back(absl::StrCat("data_parallel_size ", req.data_parallel_size()));
  }
  if (req.placement() != v1::PLACEMENT_UNSPECIFIED) {
    set.push_back("placement " + absl::AsciiStrToLower(ShortName(req.placement())));
  }
  return absl::StrJoin(set, ", ");
}

// The request's layout fields as a choice (common/elastic.h); unset ones keep the spec's.
LayoutChoice ChoiceOf(const v1::ResumeJobRequest& req) {
  LayoutChoice c;
  if (req.has_vision_degree()) c.vision_degree = req.vision_degree();
  if (req.has_text_degree()) c.text_degree = req.text_degree();
  if (req.has_data_parallel_size()) c.data_parallel_size = req.data_parallel_size();
  c.placement = req.placement();
  return c;
}

// `status` with "resume: <fields>: " in front of its message.
absl::Status Prefixed(const std::string& fields, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("resume: ", fields, ": ", status.message()));
}

}  // namespace

std::string EncodePageToken(int64_t before_seq) { return "p" + std::to_string(before_seq); }

absl::StatusOr<int64_t> DecodePageToken(const std::string& token) {
  absl::Status bad = absl::InvalidArgumentError(
      "page_token: \"" + token + "\" is not a token returned by ListJobs");
  if (token.size() < 2 || token[0] != 'p') return bad;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(token.c_str() + 1, &end, 10);
  if (errno != 0 || *end != '\0' || v <= 0) return bad;
  return static_cast<int64_t>(v);
}

JobManager::JobManager(Store& store, const Clock& clock, SpecOptions spec_options)
    : store_(store), clock_(clock), spec_options_(std::move(spec_options)) {}

v1::Event JobManager::MakeEvent(const v1::Job& job, const std::string& type,
                                const std::string& from, const std::string& to,
                                const std::string& reason) const {
  return JobEvent(job, clock_.NowMicros(), type, from, to, reason);
}

namespace {

// `spec` when every string in it is well-formed UTF-8, as the store requires: checked here,
// on the caller's thread, so that the loop's write need not (JobWrite::spec_checked).
absl::StatusOr<v1::JobSpec> CheckedUtf8(absl::StatusOr<v1::JobSpec> spec) {
  if (!spec.ok()) return spec;
  if (std::string bad = InvalidUtf8Field(*spec); !bad.empty()) {
    return absl::InvalidArgumentError("spec." + bad);
  }
  return spec;
}

}  // namespace

absl::StatusOr<v1::JobSpec> JobManager::ValidateSubmission(
    const v1::SubmitJobRequest& req) const {
  if (req.owner().size() > 256) {
    return absl::InvalidArgumentError("owner: " + std::to_string(req.owner().size()) +
                                      " bytes; at most 256");
  }
  if (!req.spec_text().empty()) {
    if (req.has_spec()) {
      return absl::InvalidArgumentError("set either spec or spec_text, not both");
    }
    return CheckedUtf8(ParseJobSpec(req.spec_text(), spec_options_));
  }
  if (!req.has_spec()) {
    return absl::InvalidArgumentError("spec: missing; send the job spec as spec or spec_text");
  }
  v1::JobSpec spec = req.spec();
  if (absl::Status s = NormalizeAndValidateSpec(&spec, spec_options_); !s.ok()) return s;
  return CheckedUtf8(std::move(spec));
}

absl::Status JobManager::Submit(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp,
                                std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  absl::StatusOr<v1::JobSpec> spec = ValidateSubmission(req);
  if (!spec.ok()) return spec.status();
  return SubmitValidated(*spec, req.dry_run(), resp, events, req.owner());
}

absl::Status JobManager::SubmitValidated(const v1::JobSpec& spec, bool dry_run,
                                         v1::SubmitJobResponse* resp,
                                         std::vector<v1::Event>* events,
                                         const std::string& owner) {
  std::vector<Submission> one(1);
  one[0] = Submission{&spec, dry_run, owner, resp, absl::OkStatus()};
  SubmitAll(one, events);
  return one[0].status;
}

v1::Job JobManager::NewJob(const v1::JobSpec& spec, const std::string& owner, int64_t now) {
  v1::Job job;
  *job.mutable_spec() = spec;
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_message("submitted");
  *job.mutable_create_time() = MicrosToTimestamp(now);
  *job.mutable_update_time() = MicrosToTimestamp(now);
  job.set_current_attempt(1);
  last_submit_seq_ = std::max(now, last_submit_seq_ + 1);
  job.set_submit_seq(last_submit_seq_);
  job.set_owner(owner);
  return job;
}

JobWrite JobManager::FirstWrite(const v1::Job& job, int64_t now) const {
  v1::Run run;
  run.set_job_id(job.id());
  run.set_attempt(1);
  run.set_state(v1::RUN_STATE_PENDING);
  *run.mutable_create_time() = MicrosToTimestamp(now);

  JobWrite write;
  write.job = job;
  write.create = true;
  write.runs.push_back(std::move(run));
  write.events.push_back(MakeEvent(job, "job.state", "", StateName(job.state()), "submitted"));
  return write;
}

void JobManager::SubmitAll(std::vector<Submission>& batch, std::vector<v1::Event>* events) {
  PreparedSubmits prepared = PrepareSubmits(batch);
  CommitSubmits(prepared, {}, events);
}

JobManager::PreparedSubmits JobManager::PrepareSubmits(std::vector<Submission>& batch) {
  DHP_CHECK_ON_THREAD(loop_);
  const int64_t now = clock_.NowMicros();
  PreparedSubmits prepared;
  for (Submission& sub : batch) {
    if (!sub.status.ok()) continue;
    v1::Job job = NewJob(*sub.spec, sub.owner, now);
    if (sub.dry_run) {
      job.set_message("dry run: the spec is valid; nothing was stored");
      *sub.resp->mutable_job() = std::move(job);
      continue;
    }
    job.set_id(NewId("j"));
    prepared.writes.push_back(FirstWrite(job, now));
    prepared.writes.back().spec_checked = sub.spec_checked;
    prepared.subs.push_back(&sub);
  }
  return prepared;
}

bool JobManager::CommitSubmits(PreparedSubmits& prepared, const std::vector<JobWrite>& extra,
                               std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  std::vector<JobWrite>& writes = prepared.writes;
  if (writes.empty()) return extra.empty() || store_.CommitAll(extra).ok();
  const size_t own = writes.size();
  writes.insert(writes.end(), extra.begin(), extra.end());
  absl::StatusOr<std::vector<v1::Event>> added = store_.CommitAll(writes);
  writes.resize(own);
  for (size_t i = 0; i < own; ++i) {
    Submission& sub = *prepared.subs[i];
    if (!added.ok() && own + extra.size() > 1) {  // each on its own: the one at fault fails alone
      absl::StatusOr<std::vector<v1::Event>> alone = store_.Commit(writes[i]);
      if (alone.ok()) events->insert(events->end(), alone->begin(), alone->end());
      sub.status = alone.status();
    } else {
      sub.status = added.status();
    }
    if (sub.status.ok()) *sub.resp->mutable_job() = std::move(writes[i].job);  // kept if not
  }
  if (added.ok()) events->insert(events->end(), added->begin(), added->end());
  return added.ok();
}

absl::Status JobManager::Get(const v1::GetJobRequest& req, v1::GetJobResponse* resp) {
  DHP_CHECK_ON_THREAD(loop_);
  if (absl::Status s = RequireJobId(req.job_id()); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = store_.GetJob(req.job_id());
  if (!job.ok()) return job.status();
  *resp->mutable_job() = *job;
  for (v1::Run& r : store_.ListRuns(req.job_id())) *resp->add_runs() = std::move(r);
  for (v1::Checkpoint& c : store_.ListCheckpoints(req.job_id())) {
    *resp->add_checkpoints() = std::move(c);
  }
  return absl::OkStatus();
}

absl::Status JobManager::List(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
  DHP_CHECK_ON_THREAD(loop_);
  if (req.page_size() < 0 || req.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError("page_size: " + std::to_string(req.page_size()) +
                                      " is out of range; use 1.." +
                                      std::to_string(kMaxPageSize) + " (0: default " +
                                      std::to_string(kDefaultPageSize) + ")");
  }
  JobQuery query;
  for (int s : req.states()) {
    if (s == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(s)) {
      return absl::InvalidArgumentError("states: " + std::to_string(s) +
                                        " is not a job state; use one of " +
                                        EnumChoices(v1::JobState_descriptor()));
    }
    query.states.push_back(static_cast<v1::JobState>(s));
  }
  query.labels.insert(req.labels().begin(), req.labels().end());
  query.owner = req.owner();
  query.limit = req.page_size() == 0 ? kDefaultPageSize : req.page_size();
  if (!req.page_token().empty()) {
    absl::StatusOr<int64_t> before = DecodePageToken(req.page_token());
    if (!before.ok()) return before.status();
    query.before_seq = *before;
  }
  absl::StatusOr<JobPage> page = store_.ListJobs(query);
  if (!page.ok()) return page.status();
  for (v1::Job& j : page->jobs) *resp->add_jobs() = std::move(j);
  if (page->next_before_seq > 0) resp->set_next_page_token(EncodePageToken(page->next_before_seq));
  return absl::OkStatus();
}

absl::Status JobManager::Cancel(const v1::CancelJobRequest& req, v1::CancelJobResponse* resp,
                                std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  if (absl::Status s = RequireJobId(req.job_id()); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = store_.GetJob(req.job_id());
  if (!job.ok()) return job.status();
  v1::JobState target;
  if (absl::Status s = CancelTarget(job->state(), &target); !s.ok()) {
    return absl::FailedPreconditionError("cannot cancel job " + job->id() + ": " +
                                         std::string(s.message()));
  }
  const std::string reason = req.reason().empty() ? "cancelled by user" : req.reason();
  const int64_t now = clock_.NowMicros();
  JobWrite write;
  write.events.push_back(
      MakeEvent(*job, "job.state", StateName(job->state()), StateName(target), reason));
  job->set_state(target);
  job->set_message(reason);
  *job->mutable_update_time() = MicrosToTimestamp(now);
  if (target == v1::JOB_STATE_CANCELLED) {
    // Nothing was running: the current run ends here too.
    for (v1::Run& run : store_.ListRuns(job->id())) {
      if (run.attempt() != job->current_attempt()) continue;
      write.events.push_back(MakeEvent(*job, "run.state", RunStateName(run.state()),
                                       RunStateName(v1::RUN_STATE_CANCELLED), reason));
      run.set_state(v1::RUN_STATE_CANCELLED);
      run.set_reason(reason);
      *run.mutable_end_time() = MicrosToTimestamp(now);
      write.runs.push_back(run);
    }
  }
  write.job = *job;
  absl::StatusOr<std::vector<v1::Event>> added = store_.Commit(write);
  if (!added.ok()) return added.status();
  events->insert(events->end(), added->begin(), added->end());
  *resp->mutable_job() = *job;
  return absl::OkStatus();
}

absl::StatusOr<std::string> JobManager::Relayout(const v1::ResumeJobRequest& req,
                                                 const SpecAdmission& admit, bool has_checkpoint,
                                                 v1::JobSpec* spec) const {
  const std::string fields = LayoutFields(req);
  if (fields.empty()) return std::string();
  if (!v1::Placement_IsValid(req.placement())) {
    return absl::InvalidArgumentError(absl::StrCat("resume: placement ", req.placement(),
                                                   ": not a placement; use one of ",
                                                   EnumChoices(v1::Placement_descriptor())));
  }
  v1::JobSpec changed = WithLayout(*spec, ChoiceOf(req));
  if (absl::Status s = NormalizeAndValidateSpec(&changed, spec_options_); !s.ok()) {
    return Prefixed(fields, s);
  }
  if (LayoutForSpec(changed).DebugString() == LayoutForSpec(*spec).DebugString()) {
    return std::string();  // the stored spec stays as it is
  }
  if (has_checkpoint) {  // the ranks will reshard it
    absl::Status s = comm::CheckReshardable(LayoutForSpec(*spec), LayoutForSpec(changed));
    if (!s.ok()) return Prefixed(fields, s);
  }
  if (admit) {
    if (absl::Status s = admit(changed); !s.ok()) return Prefixed(fields, s);
  }
  const std::string change = DescribeLayoutChange(*spec, changed);
  *spec = std::move(changed);
  return change;
}

absl::Status JobManager::Resume(const v1::ResumeJobRequest& req, v1::ResumeJobResponse* resp,
                                std::vector<v1::Event>* events, const SpecAdmission& admit) {
  DHP_CHECK_ON_THREAD(loop_);
  if (absl::Status s = RequireJobId(req.job_id()); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = store_.GetJob(req.job_id());
  if (!job.ok()) return job.status();
  if (absl::Status s = CheckResumable(job->state()); !s.ok()) {
    return absl::FailedPreconditionError("cannot resume job " + job->id() + ": " +
                                         std::string(s.message()));
  }
  const std::vector<v1::Checkpoint> checkpoints = store_.ListCheckpoints(job->id());
  const bool has_checkpoint =
      std::any_of(checkpoints.begin(), checkpoints.end(), [](const v1::Checkpoint& c) {
        return c.state() == v1::CHECKPOINT_STATE_COMPLETE;
      });
  absl::StatusOr<std::string> relayout =
      Relayout(req, admit, has_checkpoint, job->mutable_spec());
  if (!relayout.ok()) return relayout.status();
  const int64_t now = clock_.NowMicros();
  const std::string from = StateName(job->state());
  job->set_current_attempt(job->current_attempt() + 1);
  v1::Run run;
  run.set_job_id(job->id());
  run.set_attempt(job->current_attempt());
  run.set_state(v1::RUN_STATE_PENDING);
  *run.mutable_create_time() = MicrosToTimestamp(now);
  std::string reason = "resumed by user from the start (no complete checkpoint)";
  for (const v1::Checkpoint& c : checkpoints) {  // ascending by step
    if (c.state() != v1::CHECKPOINT_STATE_COMPLETE) continue;
    run.set_resume_checkpoint_id(c.id());
    run.set_start_step(c.step());
    reason = "resumed by user from checkpoint " + std::to_string(c.id()) + " at step " +
             std::to_string(c.step());
  }
  reason += *relayout;
  job->set_state(v1::JOB_STATE_QUEUED);
  job->set_message(reason);
  *job->mutable_update_time() = MicrosToTimestamp(now);

  JobWrite write;
  write.job = *job;
  write.runs.push_back(run);
  write.events.push_back(MakeEvent(*job, "job.state", from, StateName(job->state()), reason));
  write.events.push_back(
      MakeEvent(*job, "run.state", "", RunStateName(run.state()), "attempt created"));
  absl::StatusOr<std::vector<v1::Event>> added = store_.Commit(write);
  if (!added.ok()) return added.status();
  events->insert(events->end(), added->begin(), added->end());
  *resp->mutable_job() = *job;
  *resp->mutable_run() = run;
  return absl::OkStatus();
}

absl::Status JobManager::CheckCurrentAttempt(const std::string& job_id, int attempt) {
  DHP_CHECK_ON_THREAD(loop_);
  if (absl::Status s = RequireJobId(job_id); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = store_.GetJob(job_id);
  if (!job.ok()) return job.status();
  if (IsTerminal(job->state())) {
    return absl::FailedPreconditionError("job " + job_id + " is " + ShortName(job->state()) +
                                         ": the rendezvous of its attempts is over");
  }
  if (attempt != job->current_attempt()) {
    return absl::FailedPreconditionError(
        "attempt " + std::to_string(attempt) + " of job " + job_id +
        " is not current; the job is on attempt " + std::to_string(job->current_attempt()));
  }
  return absl::OkStatus();
}

}  // namespace dhp::controller
