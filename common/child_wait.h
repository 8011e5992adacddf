// Waiting for child processes with a time limit, for tests and benchmarks that fork rank
// processes: after the limit, the children still running are killed (SIGKILL) and reaped, so
// none is left behind.
//
// Thread-safety: call from the thread that owns the children; waits only for the given pids.
#ifndef DHP_COMMON_CHILD_WAIT_H_
#define DHP_COMMON_CHILD_WAIT_H_

#include <sys/types.h>

#include <chrono>
#include <vector>

namespace dhp {

// One code per pid, in order: its exit status, or -1 when it was killed after `limit` or ended
// by a signal. Polls every `poll`.
std::vector<int> WaitForChildren(const std::vector<pid_t>& pids, std::chrono::milliseconds limit,
                                 std::chrono::milliseconds poll = std::chrono::milliseconds(20));

}  // namespace dhp

#endif  // DHP_COMMON_CHILD_WAIT_H_
