// Retries of controller calls while the controller is down or restarting: what a rank does
// with its checkpoint reports (on the checkpoint writer's thread, checkpoint_writer.h), its
// checkpoint rejections and GetJob.
//
// Thread-safety: no shared state; `sleep` is called on the caller's thread.
#ifndef DHP_WORKER_RANK_RETRY_UNAVAILABLE_H_
#define DHP_WORKER_RANK_RETRY_UNAVAILABLE_H_

#include <chrono>
#include <functional>

#include "absl/status/status.h"

namespace dhp {

// Calls `call` until it returns neither UNAVAILABLE nor DEADLINE_EXCEEDED or `budget` is spent
// (back-off 100 ms doubling to 2 s, through `sleep`; null: std::this_thread::sleep_for);
// returns the last status.
absl::Status RetryWhileUnavailable(const std::function<absl::Status()>& call,
                                   std::chrono::milliseconds budget,
                                   const std::function<void(std::chrono::milliseconds)>& sleep);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_RETRY_UNAVAILABLE_H_
