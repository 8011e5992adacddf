// The per-step statistics a rank reports to the controller (ReportProgressRequest.metrics, keys
// documented in proto/dhp/v1/service.proto), which the controller exports to Prometheus with
// job, stage and rank labels. No LibTorch: the caller passes plain numbers.
#ifndef DHP_WORKER_RANK_RANK_METRICS_H_
#define DHP_WORKER_RANK_RANK_METRICS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "worker/comm/comm_stats.h"
#include "worker/rank/step_flops.h"

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
  // Model FLOPs of the global batch (every replica), and how many ranks share each stage's
  // work: the vision stage's over Sv x dp ranks (Ulysses splits every block's sequence
  // evenly), the text stage's over Tt x dp (Megatron TP splits every matmul evenly).
  std::optional<StepFlops> flops;
  int vision_ranks = 1;
  int text_ranks = 1;
};

// The CUDA caching allocator's counters for the rank's GPU, in bytes: allocated and reserved
// now, and the peak allocated since the rank started.
struct DeviceMemory {
  int64_t allocated = 0;
  int64_t reserved = 0;
  int64_t peak = 0;
};

// What the rank knows of its device.
struct RankDevice {
  double peak_flops = 0;               // dense peak FLOP/s per device; 0: unknown, no MFU
  std::optional<DeviceMemory> memory;  // GPU ranks; nullopt on CPU
};

// vision_tokens_per_s / text_tokens_per_s (for the stages the rank hosts), forward_s,
// backward_s, comm_s, optimizer_s, memory_rss_bytes, comm_bytes:<group> (bytes by tensor size
// sent plus received on each group since the rank started, from `stats`: the collectives'
// algorithmic volume, comm_stats.h, not bytes on the wire); with device.memory,
// memory_allocated_bytes, memory_reserved_bytes and memory_peak_bytes; with counts.flops and
// device.peak_flops, mfu_vision / mfu_text (see StageMfu).
std::map<std::string, double> RankStepMetrics(const RankStepTimes& times,
                                              const RankStepCounts& counts,
                                              const comm::CommStats& stats,
                                              const RankDevice& device = {});

// Model FLOPs utilisation of one stage on one rank over one step: the stage's training FLOPs
// (3 x forward, StepFlops' conventions) divided by the ranks sharing them, over step_s x
// peak_flops. step_s is the whole step (data, both stages, communication, optimizer), so on a
// collocated rank mfu_vision + mfu_text is the rank's MFU. 0 when step_s or peak_flops is not
// positive.
double StageMfu(int64_t stage_forward_flops, int stage_ranks, double step_s, double peak_flops);

// This process's resident set size in bytes (/proc/self/statm); 0 if unreadable.
int64_t ResidentSetBytes();

}  // namespace dhp

#endif  // DHP_WORKER_RANK_RANK_METRICS_H_
