// Preemption by SIGTERM: a Kubernetes eviction, `systemctl stop` or an agent stopping its ranks
// sends the rank SIGTERM and, after a grace period, SIGKILL. InstallPreemptionHandler makes the
// first SIGTERM only raise a flag (PreemptionRequested), which the training loop reads at its
// next step boundary (job_rank.h: every rank then checkpoints at that step and exits
// kRankExitPreempted). A second SIGTERM ends the process at once (exit 143), as it would
// have without the handler.
//
// Thread-safety: the flag is a lock-free atomic, safe to read from any thread and to set from
// the signal handler.
#ifndef DHP_WORKER_RANK_PREEMPTION_H_
#define DHP_WORKER_RANK_PREEMPTION_H_

namespace dhp {

// Installs the SIGTERM handler (process-wide; call once, early in main).
void InstallPreemptionHandler();
// Whether a SIGTERM has arrived since InstallPreemptionHandler.
bool PreemptionRequested();

}  // namespace dhp

#endif  // DHP_WORKER_RANK_PREEMPTION_H_
