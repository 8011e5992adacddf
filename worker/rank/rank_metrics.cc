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

std::map<std::string, double> RankStepMetrics(const RankStepTimes& times,
                                              const RankStepCounts& counts,
                                              const comm::CommStats& stats) {
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
  for (const auto& [key, c] : stats.Snapshot()) {
    m["comm_bytes:" + key.first] += static_cast<double>(c.bytes_sent + c.bytes_received);
  }
  return m;
}

}  // namespace dhp
