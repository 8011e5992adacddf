#include "common/child_wait.h"

#include <signal.h>
#include <sys/wait.h>

#include <thread>

namespace dhp {

std::vector<int> WaitForChildren(const std::vector<pid_t>& pids, std::chrono::milliseconds limit,
                                 std::chrono::milliseconds poll) {
  constexpr int kRunning = -2;
  std::vector<int> codes(pids.size(), kRunning);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t done = 0;
  while (done < pids.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (codes[i] == kRunning && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        ++done;
      }
    }
    if (done < pids.size()) std::this_thread::sleep_for(poll);
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (codes[i] != kRunning) continue;
    kill(pids[i], SIGKILL);
    waitpid(pids[i], nullptr, 0);
    codes[i] = -1;
  }
  return codes;
}

}  // namespace dhp
