// The Controller's SubmitJob: submits queue for the loop, which stores every submit queued
// meanwhile in one transaction (group commit) and runs one scheduling pass for them all.
//
// With 10,000 jobs queued, most of a submit's time on the loop was its SQLite commits (the
// job's rows, and the scheduler's note of why it waits): their WAL frames, written per
// transaction. A batch shares those pages and commits once: the pass decides before the
// jobs are stored, and their notes go into their first write. A submit that finds the
// loop idle is a batch of one and waits for nothing more, so a lone submit is not delayed.
#include <future>
#include <optional>
#include <thread>

#include "boost/asio/post.hpp"
#include "common/logging.h"
#include "controller/controller.h"

namespace dhp::controller {

void Controller::SubmitJobAsync(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp,
                                Done done, std::function<void()> taken) {
  // Parsing and validation need no state: on the caller's thread, not the loop.
  absl::StatusOr<v1::JobSpec> spec = jobs_.ValidateSubmission(req);
  if (!spec.ok()) return done(spec.status());
  {
    std::lock_guard<std::mutex> lock(dispatch_mu_);
    if (!dispatch_closed_) {
      submits_.push_back(PendingSubmit{*std::move(spec), req.dry_run(), req.owner(), resp,
                                       std::move(done), std::move(taken)});
      if (submits_.size() == 1) QueueCall(api::Lane::kUser, [this] { FlushSubmits(); });
      return;
    }
  }
  done(absl::UnavailableError("the controller is shutting down"));
}

absl::Status Controller::SubmitJob(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp) {
  if (std::this_thread::get_id() == loop_id_) {  // a batch of one, now: the loop cannot wait
    absl::StatusOr<v1::JobSpec> spec = jobs_.ValidateSubmission(req);
    if (!spec.ok()) return spec.status();
    std::vector<PendingSubmit> one(1);
    one[0] = PendingSubmit{*std::move(spec), req.dry_run(), req.owner(), resp, nullptr, nullptr};
    return SubmitBatch(one)[0];
  }
  // Every queued submit is answered, by the loop or by Stop (UNAVAILABLE): no timeout needed.
  std::promise<absl::Status> answered;
  std::future<absl::Status> answer = answered.get_future();
  SubmitJobAsync(req, resp, [&answered](const absl::Status& s) { answered.set_value(s); }, nullptr);
  return answer.get();
}

void Controller::FlushSubmits() {
  std::vector<PendingSubmit> batch;
  {
    std::lock_guard<std::mutex> lock(dispatch_mu_);
    batch.swap(submits_);
  }
  if (stopped_) {  // Stop's last run of the queue, on its own thread
    for (PendingSubmit& p : batch) {
      p.done(absl::UnavailableError("the controller is shutting down"));
    }
    return;
  }
  submit_batch_jobs_.Observe(static_cast<double>(batch.size()));
  for (PendingSubmit& p : batch) {
    if (p.taken) p.taken();
  }
  std::vector<absl::Status> answers;
  {
    LoopLedger::Span span(ledger_, LoopLedger::kCalls);
    answers = SubmitBatch(batch);
  }
  for (size_t i = 0; i < batch.size(); ++i) batch[i].done(answers[i]);
}

std::vector<absl::Status> Controller::SubmitBatch(std::vector<PendingSubmit>& batch) {
  std::vector<Submission> subs(batch.size());
  std::vector<Supervisor::Admitted> admitted(batch.size());  // each demand, computed once
  for (size_t i = 0; i < batch.size(); ++i) {
    const PendingSubmit& p = batch[i];
    // Every PendingSubmit's spec came from ValidateSubmission.
    subs[i] = Submission{&p.spec, p.dry_run, p.owner, p.resp,
                         supervisor_.CheckAdmission(p.spec, &admitted[i]), /*spec_checked=*/true};
  }
  // The jobs are queued and the pass decides why they wait before they are stored, so that
  // the jobs and those notes take one transaction.
  JobManager::PreparedSubmits prepared = jobs_.PrepareSubmits(subs);
  std::vector<v1::Job*> fresh_jobs;
  for (size_t i = 0; i < prepared.writes.size(); ++i) {
    v1::Job& job = prepared.writes[i].job;
    supervisor_.OnJobQueued(job, std::move(admitted[prepared.subs[i] - subs.data()]));
    fresh_jobs.push_back(&job);
  }
  std::optional<Supervisor::Pass> pass;
  {
    const Supervisor::FreshJobs fresh(supervisor_, fresh_jobs);
    pass = supervisor_.Decide();
  }
  static const std::vector<JobWrite> kNoNotes;
  const std::vector<JobWrite>& notes = pass.has_value() ? pass->notes : kNoNotes;
  std::vector<v1::Event> events;
  if (!jobs_.CommitSubmits(prepared, notes, &events)) supervisor_.NotesLost(notes);
  for (size_t i = 0; i < prepared.writes.size(); ++i) {
    if (!prepared.subs[i]->status.ok()) supervisor_.Unqueue(prepared.writes[i].job);
  }
  if (pass.has_value()) {
    if (absl::Status s = supervisor_.PlaceDecided(*pass, &events); !s.ok()) {
      DHP_LOG(ERROR) << "scheduling pass failed: " << s;
    }
  }
  Settle(events);  // a pass over the whole queue if some job was not stored
  std::vector<absl::Status> answers;
  answers.reserve(subs.size());
  for (const Submission& sub : subs) {
    answers.push_back(sub.status);
    if (!sub.status.ok() || sub.dry_run) continue;
    // The job as the scheduling pass left it: still queued, only its message may differ;
    // placed, read back.
    v1::Job& job = *sub.resp->mutable_job();
    if (std::optional<std::string> message = supervisor_.QueuedMessage(job)) {
      job.set_message(*std::move(message));
    } else if (absl::StatusOr<v1::Job> now = store_.GetJob(job.id()); now.ok()) {
      job = *std::move(now);
    }
  }
  return answers;
}

}  // namespace dhp::controller
