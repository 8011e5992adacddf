// Abseil's Mutex without its lock-order graph, for dhp's long-running processes.
//
// Debian 12 builds Abseil without NDEBUG, so its Mutex runs in debug mode: each Lock records
// the locks already held in a process-wide graph (under one global spin lock, with a stack
// trace on each new edge), to report a lock-order inversion. gRPC takes several absl::Mutex
// locks per call, so the controller paid this on every heartbeat and submit (~2% of its CPU in
// a profile of 4 closed-loop submitters). dhp's own code uses std::mutex; nothing of ours
// relies on the graph.
//
//   int main(...) { dhp::SkipMutexOrderChecks(); ... }
#ifndef DHP_COMMON_MUTEX_MODE_H_
#define DHP_COMMON_MUTEX_MODE_H_

namespace dhp {

// Turns Abseil's lock-order checking off for the whole process (absl::
// SetMutexDeadlockDetectionMode(kIgnore)). Call it early in main, before other threads start.
void SkipMutexOrderChecks();

}  // namespace dhp

#endif  // DHP_COMMON_MUTEX_MODE_H_
