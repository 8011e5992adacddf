// CheckpointWriter: writes and reports a rank's checkpoints off the training thread (issue 15
// §4), so that training neither stops for the write (temporary file, fsync, CRC-32C, rename)
// nor for a controller that is down while the report waits.
//
// The training thread snapshots its state into memory of its own at a step boundary
// (rank_checkpoint.h SnapshotToHost) and hands Submit a task: a function that writes that
// snapshot as the shard and returns the ReportCheckpointRequest that describes it. One
// background thread runs the tasks in submission order: write, then `report`. A task's
// snapshot is freed once it is written (its `write` function is dropped), before the report.
//
//  - Reports: a report the controller does not answer (UNAVAILABLE, DEADLINE_EXCEEDED:
//    retry_unavailable.h) is sent again, backing off from 100 ms to options.max_backoff, for as
//    long as it takes: a controller outage fails no rank. While it lasts, options.log gets a
//    line once a minute (options.note_every): "checkpoint at step 200: ReportCheckpoint
//    unanswered for 61 s (UNAVAILABLE: ...); retrying every 10 s; 2 of at most 2 checkpoints in
//    flight: the next checkpoint waits". Any other answer (FAILED_PRECONDITION, NOT_FOUND,
//    INVALID_ARGUMENT, ...) is final: a failure, at once.
//  - Bound: at most `max_in_flight` checkpoints are in flight (submitted, not yet written and
//    reported): the only bound on an outage. Submit waits for the oldest one to end when the
//    bound is reached (training waits at that step boundary); WaitForRoom waits for the same
//    before the caller takes its snapshot, so that snapshots alive are at most max_in_flight
//    (fewer while reports wait: a written checkpoint holds none).
//  - Failures: the first write or report failure is kept, as "checkpoint at step <S>: <cause>"
//    with the cause's code; status() returns it from then on (the training loop checks it at
//    every step boundary and fails the rank), Submit returns it instead of queuing, and tasks
//    still queued are dropped unwritten.
//  - Drain() waits until nothing is in flight and returns status(); the destructor drains too.
//    With the controller down, that is until it answers (or the process is killed: see
//    job_rank.h for what bounds it).
//  - Synchronous mode (async false, checkpoint.async_write: false): Submit runs the task on the
//    caller's thread before it returns; same results, no thread, no second copy of the state.
//
// Completed checkpoints leave a line each ("checkpoint step 2: <path>/<file>, 123 bytes, crc32c
// 0a1b2c3d, write 0.012 s, reported 0.015 s after submit") for TakeNotes, so that the caller's
// log is only ever called from its own thread; only the outage lines go to options.log, from
// the thread that reports, as they happen (a training thread waiting for the bound cannot).
//
// Thread-safety: every method may be called from any thread; normally the training thread
// calls them and the writer's own thread runs the tasks and `report`.
#ifndef DHP_WORKER_RANK_CHECKPOINT_WRITER_H_
#define DHP_WORKER_RANK_CHECKPOINT_WRITER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dhp/v1/service.pb.h"

namespace dhp {

struct CheckpointTask {
  int64_t step = 0;
  // Writes the shard; returns the report that describes it (write_seconds filled in).
  std::function<absl::StatusOr<v1::ReportCheckpointRequest>()> write;
};

struct CheckpointWriterOptions {
  bool async = true;
  int max_in_flight = 2;  // >= 1
  // Retries of a report the controller does not answer: back-off 100 ms doubling to this.
  std::chrono::milliseconds max_backoff = std::chrono::seconds(10);
  // Between retries; null: std::this_thread::sleep_for. Called on the thread that reports.
  std::function<void(std::chrono::milliseconds)> sleep;
  // A line while a report goes unanswered, every note_every; called on the thread that
  // reports (the writer's own, when async), so it must be thread-safe. Null: none.
  std::chrono::milliseconds note_every = std::chrono::minutes(1);
  std::function<void(const std::string&)> log;
};

class CheckpointWriter {
 public:
  // One attempt at telling the controller (CheckpointWriter retries it).
  using ReportFn = std::function<absl::Status(const v1::ReportCheckpointRequest&)>;

  CheckpointWriter(ReportFn report, CheckpointWriterOptions options);
  // Drains (see Drain), then ends the thread.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues `task` (async) or runs it now (sync). Async: waits while max_in_flight checkpoints
  // are in flight. Returns status(): the first failure so far, this task's included in sync
  // mode.
  absl::Status Submit(CheckpointTask task);
  // Async: waits until Submit would queue at once (fewer than max_in_flight in flight, or a
  // failure); sync: does not wait. Returns status(). Call it before taking a snapshot.
  absl::Status WaitForRoom();
  // The first failure so far; OK if none. Does not wait.
  absl::Status status() const;
  // Waits until every submitted checkpoint is written and reported (or dropped after a
  // failure); returns status().
  absl::Status Drain();
  // Checkpoints submitted and not yet ended.
  int in_flight() const;
  // The lines of checkpoints completed since the last call, oldest first.
  std::vector<std::string> TakeNotes();

 private:
  struct Queued {
    CheckpointTask task;
    std::chrono::steady_clock::time_point submitted;
  };
  void Loop();
  // Writes (then drops q.task.write and with it the snapshot) and reports; the note on
  // success, the annotated failure otherwise.
  absl::StatusOr<std::string> Run(Queued& q) const;
  bool HasRoom() const;  // mu_ held
  // `report_` until the controller answers (RetryUntilAnswered), logging a long outage.
  absl::Status Report(const v1::ReportCheckpointRequest& req) const;
  // The line of a report of `step` unanswered for `outage`.
  std::string OutageLine(int64_t step, std::chrono::milliseconds outage,
                         const absl::Status& last) const;
  void Finish(const absl::StatusOr<std::string>& outcome);  // mu_ held

  const ReportFn report_;
  const CheckpointWriterOptions options_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable work_;   // the thread: a task queued, or stopping
  std::condition_variable ended_;  // Submit / Drain: a checkpoint ended
  std::deque<Queued> queue_;       // not yet started
  int in_flight_ = 0;              // queued + running
  absl::Status status_;            // first failure
  std::vector<std::string> notes_;
  bool stopping_ = false;
  std::thread thread_;  // started by the first asynchronous Submit
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_CHECKPOINT_WRITER_H_
