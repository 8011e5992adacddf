// Test helpers for the Scheduler's tests (scheduler_test.cc, scheduler_demand_test.cc): nodes,
// slots and demands in one line each, and what a ScheduleResult placed.
#ifndef DHP_CONTROLLER_SCHEDULER_TEST_UTIL_H_
#define DHP_CONTROLLER_SCHEDULER_TEST_UTIL_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "controller/scheduler.h"

namespace dhp::controller {

inline void PrintTo(const SlotRef& s, std::ostream* os) {
  *os << s.node_id << (s.gpu ? ":gpu" : ":cpu") << s.slot;
}

namespace test {

inline constexpr int64_t kGiB = 1LL << 30;

inline NodeCapacity Cpu(const std::string& id, int slots, int64_t memory = 0) {
  return NodeCapacity{id, false, slots, memory, true};
}
inline NodeCapacity Gpu(const std::string& id, int slots, int64_t memory = 0) {
  return NodeCapacity{id, true, slots, memory, true};
}
inline SlotRef C(const std::string& node, int slot) { return SlotRef{node, slot, false}; }
inline SlotRef G(const std::string& node, int slot) { return SlotRef{node, slot, true}; }

inline JobDemand Job(const std::string& id, int world, std::vector<std::vector<int>> groups = {},
                     int priority = 0, int64_t seq = 0, int64_t memory = 0) {
  JobDemand j;
  j.job_id = id;
  j.world_size = world;
  j.same_node_groups = std::move(groups);
  j.priority = priority;
  j.submit_seq = seq;
  j.memory_bytes_per_rank = memory;
  return j;
}

// The placement of `job` in `r`, or empty.
inline std::vector<SlotRef> PlacementOf(const ScheduleResult& r, const std::string& job) {
  for (const PlacementDecision& d : r.placed) {
    if (d.job_id == job) return d.ranks;
  }
  return {};
}
// The placed job ids in order, "*" marking a backfilled one.
inline std::vector<std::string> PlacedIds(const ScheduleResult& r) {
  std::vector<std::string> ids;
  for (const PlacementDecision& d : r.placed) ids.push_back(d.job_id + (d.backfilled ? "*" : ""));
  return ids;
}

}  // namespace test
}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_SCHEDULER_TEST_UTIL_H_
