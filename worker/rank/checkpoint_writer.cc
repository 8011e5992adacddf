#include "worker/rank/checkpoint_writer.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/rank/retry_unavailable.h"

namespace dhp {

namespace {

using Clock = std::chrono::steady_clock;

absl::Status AtStep(int64_t step, const absl::Status& cause, const std::string& what) {
  return absl::Status(cause.code(),
                      absl::StrCat("checkpoint at step ", step, ": ", what, cause.message()));
}

}  // namespace

CheckpointWriter::CheckpointWriter(ReportFn report, CheckpointWriterOptions options)
    : report_(std::move(report)), options_(options) {
  if (options_.max_in_flight < 1) {
    absl::FPrintF(stderr, "CheckpointWriter: max_in_flight %d must be at least 1\n",
                  options_.max_in_flight);
    std::abort();
  }
}

CheckpointWriter::~CheckpointWriter() {
  Drain().IgnoreError();  // a failure was for status() and the step boundaries to see
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status CheckpointWriter::Submit(CheckpointTask task) {
  Queued q{std::move(task), Clock::now()};
  if (!options_.async) {
    if (absl::Status s = status(); !s.ok()) return s;
    const absl::StatusOr<std::string> outcome = Run(q);
    std::lock_guard<std::mutex> lock(mu_);
    Finish(outcome);
    return status_;
  }
  std::unique_lock<std::mutex> lock(mu_);
  ended_.wait(lock, [&] { return HasRoom(); });
  if (!status_.ok()) return status_;
  queue_.push_back(std::move(q));
  ++in_flight_;
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  lock.unlock();
  work_.notify_one();
  return absl::OkStatus();
}

absl::Status CheckpointWriter::WaitForRoom() {
  std::unique_lock<std::mutex> lock(mu_);
  if (options_.async) ended_.wait(lock, [&] { return HasRoom(); });
  return status_;
}

bool CheckpointWriter::HasRoom() const {
  return !status_.ok() || in_flight_ < options_.max_in_flight;
}

absl::Status CheckpointWriter::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

absl::Status CheckpointWriter::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  ended_.wait(lock, [&] { return in_flight_ == 0; });
  return status_;
}

int CheckpointWriter::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

std::vector<std::string> CheckpointWriter::TakeNotes() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.swap(notes_);
  return out;
}

void CheckpointWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    if (!status_.ok()) {  // an earlier checkpoint failed: this one is dropped unwritten
      --in_flight_;
      ended_.notify_all();
      continue;
    }
    lock.unlock();
    absl::StatusOr<std::string> outcome = Run(q);
    lock.lock();
    Finish(outcome);
    --in_flight_;
    ended_.notify_all();
  }
}

absl::StatusOr<std::string> CheckpointWriter::Run(Queued& q) const {
  const int64_t step = q.task.step;
  absl::StatusOr<v1::ReportCheckpointRequest> req = q.task.write();
  q.task.write = nullptr;  // frees the snapshot: the report may wait long for the controller
  if (!req.ok()) return AtStep(step, req.status(), "");
  if (absl::Status s = Report(*req); !s.ok()) return AtStep(step, s, "ReportCheckpoint: ");
  const double since = std::chrono::duration<double>(Clock::now() - q.submitted).count();
  return absl::StrFormat("checkpoint step %d: %s/%s, %d bytes, crc32c %s, write %.3f s, "
                         "reported %.3f s after submit",
                         step, req->path(), req->shard().file(), req->shard().size_bytes(),
                         req->shard().crc32c(), req->write_seconds(), since);
}

absl::Status CheckpointWriter::Report(const v1::ReportCheckpointRequest& req) const {
  UntilAnsweredOptions retry;
  retry.max_backoff = options_.max_backoff;
  retry.sleep = options_.sleep;
  retry.note_every = options_.note_every;
  if (options_.log) {
    retry.note = [&](std::chrono::milliseconds outage, const absl::Status& last) {
      options_.log(OutageLine(req.step(), outage, last));
    };
  }
  return RetryUntilAnswered([&] { return report_(req); }, retry);
}

std::string CheckpointWriter::OutageLine(int64_t step, std::chrono::milliseconds outage,
                                         const absl::Status& last) const {
  const std::string head = absl::StrFormat(
      "checkpoint at step %d: ReportCheckpoint unanswered for %d s (%s); retrying every %.3g s",
      step, std::chrono::duration_cast<std::chrono::seconds>(outage).count(), last.ToString(),
      std::chrono::duration<double>(options_.max_backoff).count());
  if (!options_.async) return head + "; training waits (checkpoint.async_write is off)";
  const int n = in_flight();
  return absl::StrFormat("%s; %d of at most %d checkpoints in flight%s", head, n,
                         options_.max_in_flight,
                         n >= options_.max_in_flight ? ": the next checkpoint waits"
                                                     : ", training goes on");
}

void CheckpointWriter::Finish(const absl::StatusOr<std::string>& outcome) {
  if (outcome.ok()) {
    notes_.push_back(*outcome);
  } else if (status_.ok()) {
    status_ = outcome.status();
  }
}

}  // namespace dhp
