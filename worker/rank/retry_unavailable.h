// Retries of controller calls while the controller is down or restarting: what a rank does
// with its checkpoint reports (on the checkpoint writer's thread, checkpoint_writer.h), its
// checkpoint rejections and GetJob.
//
// "Down" means the call got no answer: UNAVAILABLE (no connection: the controller is
// restarting, or its host refuses or is gone) or DEADLINE_EXCEEDED (connected or not, nothing
// came back within the call's deadline: an unreachable host whose packets are dropped, or a
// controller too stalled to answer). Any other status is the controller's answer and ends the
// retries: FAILED_PRECONDITION, NOT_FOUND, INVALID_ARGUMENT, ... are final. The calls retried
// here are idempotent on the controller's side, so a call that was served but whose answer was
// lost may safely be sent again.
//
// Thread-safety: no shared state; `sleep` and `note` are called on the caller's thread.
#ifndef DHP_WORKER_RANK_RETRY_UNAVAILABLE_H_
#define DHP_WORKER_RANK_RETRY_UNAVAILABLE_H_

#include <chrono>
#include <functional>

#include "absl/status/status.h"

namespace dhp {

// Whether `s` says that the controller did not answer (UNAVAILABLE, DEADLINE_EXCEEDED).
bool ControllerDidNotAnswer(const absl::Status& s);

// Calls `call` until it returns neither UNAVAILABLE nor DEADLINE_EXCEEDED or `budget` is spent
// (back-off 100 ms doubling to 2 s, through `sleep`; null: std::this_thread::sleep_for);
// returns the last status.
absl::Status RetryWhileUnavailable(const std::function<absl::Status()>& call,
                                   std::chrono::milliseconds budget,
                                   const std::function<void(std::chrono::milliseconds)>& sleep);

// How RetryUntilAnswered waits and tells of a long outage.
struct UntilAnsweredOptions {
  // Back-off between calls: 100 ms, doubling up to this.
  std::chrono::milliseconds max_backoff = std::chrono::seconds(10);
  // Null: std::this_thread::sleep_for.
  std::function<void(std::chrono::milliseconds)> sleep;
  // Called once the controller has not answered for `note_every`, then at most once per
  // `note_every` while that lasts, with how long it has been and the last status. Null: none.
  std::chrono::milliseconds note_every = std::chrono::minutes(1);
  std::function<void(std::chrono::milliseconds outage, const absl::Status& last)> note;
};

// Calls `call` until the controller answers (ControllerDidNotAnswer is false), however long
// that takes; returns that answer. How long it has been is the larger of the time slept and
// the time passed, so a `sleep` that does not sleep (tests) still counts.
absl::Status RetryUntilAnswered(const std::function<absl::Status()>& call,
                                const UntilAnsweredOptions& options);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_RETRY_UNAVAILABLE_H_
