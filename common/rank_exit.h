// Exit codes of dhp-rank that mean more than "failed", shared by the rank (which exits with
// them) and the controller (which reads them from the agent's RankStatus). No dependencies.
#ifndef DHP_COMMON_RANK_EXIT_H_
#define DHP_COMMON_RANK_EXIT_H_

namespace dhp {

// The resume checkpoint's shard was missing or corrupt; the rank told the controller.
inline constexpr int kRankExitCheckpointRejected = 3;
// Preempted: a rank got SIGTERM (a Kubernetes eviction, `systemctl stop`, the agent stopping);
// every rank checkpointed at the same step boundary and stopped. Not a failure of the job
// (EX_TEMPFAIL: try again later).
inline constexpr int kRankExitPreempted = 75;

}  // namespace dhp

#endif  // DHP_COMMON_RANK_EXIT_H_
