// AwaitUnlessGone: how the REST gateway runs the rendezvous waits (DhpService::KvGetAsync,
// KvWaitAsync). A REST connection's thread blocks for the wait, as before, but checks every
// `poll` whether its client is still there; once the client has gone (closed the connection,
// crashed, gave up), it cancels the wait's CancelSignal, so that the wait ends at once rather
// than holding its place (and this thread) until its timeout, as gRPC's OnCancel does.
//
// Thread-safety: call from the connection's thread; `start`'s done may run on any thread.
#ifndef DHP_API_REST_WAIT_H_
#define DHP_API_REST_WAIT_H_

#include <chrono>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "api/service.h"
#include "common/cancel_signal.h"

namespace dhp::api {

// Calls `start(done, cancel)` and returns the status `done` got. While waiting, `gone()` is
// asked every `poll`; the first true cancels `cancel` (the call should then end soon, with
// CANCELLED). Returns only after `done` ran, so what `start` handed the call may live on the
// caller's stack.
absl::Status AwaitUnlessGone(
    const std::function<bool()>& gone,
    const std::function<void(DhpService::Done, std::shared_ptr<CancelSignal>)>& start,
    std::chrono::milliseconds poll = std::chrono::milliseconds(100));

}  // namespace dhp::api

#endif  // DHP_API_REST_WAIT_H_
