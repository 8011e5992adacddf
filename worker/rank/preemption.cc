#include "worker/rank/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace dhp {
namespace {

std::atomic<bool> g_preempted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void OnSigterm(int) {
  if (g_preempted.exchange(true)) _exit(128 + SIGTERM);  // the second one: stop now
  static const char kNote[] =
      "dhp-rank: SIGTERM: checkpointing at the next step boundary, then exiting (a second "
      "SIGTERM exits at once)\n";
  ssize_t ignored = write(STDERR_FILENO, kNote, sizeof(kNote) - 1);
  (void)ignored;
}

}  // namespace

void InstallPreemptionHandler() {
  struct sigaction sa {};
  sa.sa_handler = OnSigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
}

bool PreemptionRequested() { return g_preempted.load(); }

}  // namespace dhp
