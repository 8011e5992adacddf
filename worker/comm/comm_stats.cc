#include "worker/comm/comm_stats.h"

namespace dhp::comm {

Volume AllReduceVolume(int64_t bytes, int group_size) {
  const int64_t v = 2 * bytes * (group_size - 1) / group_size;
  return {v, v};
}

Volume AllGatherVolume(int64_t bytes_per_rank, int group_size) {
  const int64_t v = bytes_per_rank * (group_size - 1);
  return {v, v};
}

Volume ReduceScatterVolume(int64_t input_bytes, int group_size) {
  const int64_t v = input_bytes * (group_size - 1) / group_size;
  return {v, v};
}

Volume AllToAllVolume(int64_t input_bytes, int group_size) {
  const int64_t v = input_bytes * (group_size - 1) / group_size;
  return {v, v};
}

Volume BroadcastVolume(int64_t bytes, int group_size, bool is_root) {
  if (group_size <= 1) return {0, 0};
  if (is_root) return {bytes * (group_size - 1), 0};
  return {0, bytes};
}

void CommStats::Record(std::string_view group, std::string_view op, const Volume& volume) {
  std::lock_guard<std::mutex> lock(mu_);
  CommCounters& c = counters_[Key(std::string(group), std::string(op))];
  c.calls += 1;
  c.tensor_bytes_sent += volume.sent;
  c.tensor_bytes_received += volume.received;
}

CommCounters CommStats::Get(std::string_view group, std::string_view op) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counters_.find(Key(std::string(group), std::string(op)));
  return it == counters_.end() ? CommCounters{} : it->second;
}

CommCounters CommStats::GroupTotal(std::string_view group) const {
  std::lock_guard<std::mutex> lock(mu_);
  CommCounters total;
  for (const auto& [key, c] : counters_) {
    if (key.first == group) total += c;
  }
  return total;
}

CommCounters CommStats::OpTotal(std::string_view op) const {
  std::lock_guard<std::mutex> lock(mu_);
  CommCounters total;
  for (const auto& [key, c] : counters_) {
    if (key.second == op) total += c;
  }
  return total;
}

CommCounters CommStats::Total() const {
  std::lock_guard<std::mutex> lock(mu_);
  CommCounters total;
  for (const auto& [key, c] : counters_) total += c;
  return total;
}

std::map<CommStats::Key, CommCounters> CommStats::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void CommStats::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.clear();
}

}  // namespace dhp::comm
