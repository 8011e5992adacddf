#include "worker/rank/rank_metrics.h"

#include <unistd.h>

#include <fstream>

namespace dhp {

int64_t ResidentSetBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

double StageMfu(int64_t stage_forward_flops, int stage_ranks, double step_s, double peak_flops) {
  if (step_s <= 0 || peak_flops <= 0 || stage_ranks < 1) return 0;
  const double per_rank = 3.0 * static_cast<double>(stage_forward_flops) / stage_ranks;
  return per_rank / (step_s * peak_flops);
}

std::map<std::string, double> RankStepMetrics(const RankStepTimes& times,
                                              const RankStepCounts& counts,
                                              const comm::CommStats& stats,
                                              const RankDevice& device) {
  std::map<std::string, double> m;
  if (times.step_s > 0) {
    if (counts.has_vision) m["vision_tokens_per_s"] = counts.patches / times.step_s;
    if (counts.has_text) m["text_tokens_per_s"] = counts.tokens / times.step_s;
  }
  m["forward_s"] = times.forward_s;
  m["backward_s"] = times.backward_s;
  m["comm_s"] = times.comm_s;
  m["optimizer_s"] = times.optimizer_s;
  m["memory_rss_bytes"] = static_cast<double>(ResidentSetBytes());
  if (device.memory.has_value()) {
    m["memory_allocated_bytes"] = static_cast<double>(device.memory->allocated);
    m["memory_reserved_bytes"] = static_cast<double>(device.memory->reserved);
    m["memory_peak_bytes"] = static_cast<double>(device.memory->peak);
  }
  if (counts.flops.has_value() && device.peak_flops > 0 && times.step_s > 0) {
    const StepFlops& f = *counts.flops;
    if (counts.has_vision) {
      m["mfu_vision"] = StageMfu(f.vision_linear + f.vision_attention, counts.vision_ranks,
                                 times.step_s, device.peak_flops);
    }
    if (counts.has_text) {
      m["mfu_text"] = StageMfu(f.text_linear + f.text_attention, counts.text_ranks,
                               times.step_s, device.peak_flops);
    }
  }
  for (const auto& [key, c] : stats.Snapshot()) {
    m["comm_bytes:" + key.first] +=
        static_cast<double>(c.tensor_bytes_sent + c.tensor_bytes_received);
  }
  return m;
}

}  // namespace dhp
