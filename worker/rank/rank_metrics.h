// The per-step statistics a rank reports to the controller (ReportProgressRequest.metrics, keys
// documented in proto/dhp/v1/service.proto), which the controller exports to Prometheus with
// job, stage and rank labels. No LibTorch: the caller passes plain numbers.
#ifndef DHP_WORKER_RANK_RANK_METRICS_H_
#define DHP_WORKER_RANK_RANK_METRICS_H_

#include <cstdint>
#include <map>
#include <string>

#include "worker/comm/comm_stats.h"

namespace dhp {

struct RankStepTimes {
  double step_s = 0;       // the whole step, data loading included
  double forward_s = 0, backward_s = 0, comm_s = 0, optimizer_s = 0;
};

struct RankStepCounts {
  int64_t tokens = 0;      // all tokens of the global batch (the text stage's work)
  int64_t patches = 0;     // vision patches of the global batch (the vision stage's work)
  bool has_vision = false;
  bool has_text = false;
};

// vision_tokens_per_s / text_tokens_per_s (for the stages the rank hosts), forward_s,
// backward_s, comm_s, optimizer_s, memory_rss_bytes and comm_bytes:<group> (bytes sent plus
// received on each group since the rank started, from `stats`).
std::map<std::string, double> RankStepMetrics(const RankStepTimes& times,
                                              const RankStepCounts& counts,
                                              const comm::CommStats& stats);

// This process's resident set size in bytes (/proc/self/statm); 0 if unreadable.
int64_t ResidentSetBytes();

}  // namespace dhp

#endif  // DHP_WORKER_RANK_RANK_METRICS_H_
