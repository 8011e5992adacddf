// Internals of the Scheduler (controller/scheduler.h), shared by its source files and by nothing
// else: the header is in the `scheduler` library's srcs, not its hdrs. The files, by concept:
//   scheduler.cc            the public API, node and allocation bookkeeping, the Schedule() pass
//   scheduler_placement.cc  placing a job's same-node groups onto free slots (best fit, fewest
//                           nodes, slot order) and the head job's reservation
//   scheduler_demand.cc     DemandForSpec, job shapes, feasibility and the waiting reasons
//
// Thread-safety: as the Scheduler's: none; the Controller calls it only on its loop thread.
#ifndef DHP_CONTROLLER_SCHEDULER_INTERNAL_H_
#define DHP_CONTROLLER_SCHEDULER_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "controller/scheduler.h"

namespace dhp::controller {
namespace scheduler_internal {

// Slot owners other than job handles (which are >= 0).
inline constexpr int kFree = -1;
inline constexpr int kBlocked = -2;  // free, but in the head's reservation (during a pass only)
inline constexpr int kProbe = -3;    // taken by a trial placement that is undone at once

inline constexpr int kCpu = 0;
inline constexpr int kGpu = 1;
inline constexpr int kMaxWorld = 1 << 20;  // a larger demand is a caller bug, reported as invalid

inline int KindOf(bool gpu) { return gpu ? kGpu : kCpu; }
inline const char* KindName(int kind) { return kind == kGpu ? "GPU" : "CPU"; }

inline bool MemoryOk(const NodeCapacity& node, int64_t per_rank) {
  return per_rank <= 0 || node.memory_bytes_per_slot <= 0 || node.memory_bytes_per_slot >= per_rank;
}

// The nodes of one slot kind ordered by (free slots, node index), so that best fit is a
// lower_bound. Nodes not indexed (not schedulable, other kind) have Free() == -1.
class FreeIndex {
 public:
  void Reset(size_t nodes) {
    by_free_.clear();
    free_.assign(nodes, -1);
    total_ = 0;
  }
  void Grow(size_t nodes) { free_.resize(nodes, -1); }
  void Set(int node, int free) {
    Remove(node);
    free_[node] = free;
    by_free_.insert({free, node});
    total_ += free;
  }
  void Remove(int node) {
    if (free_[node] < 0) return;
    by_free_.erase({free_[node], node});
    total_ -= free_[node];
    free_[node] = -1;
  }
  int Free(int node) const { return free_[node]; }
  int64_t total() const { return total_; }
  int max_free() const { return by_free_.empty() ? 0 : by_free_.rbegin()->first; }

  // Where a group of `need` slots goes, `remaining` (>= need) being the job's ranks still to
  // place: among `preferred` (the nodes the job already uses) the node with the fewest free
  // slots that still holds the group; else, opening a node, the best fit for all `remaining`
  // ranks if one node can take them (so that the rest of the job needs no further node), else
  // the best fit for the group. Ties go to the lower node index. -1 if no node passing `ok`
  // has room.
  template <class Ok>
  int BestFit(int need, int remaining, const std::vector<int>& preferred, const Ok& ok) const {
    int best = -1;
    for (int n : preferred) {
      const int f = free_[n];
      if (f < need) continue;
      if (best >= 0 && (f > free_[best] || (f == free_[best] && n > best))) continue;
      if (ok(n)) best = n;
    }
    if (best >= 0) return best;
    if (remaining > need) {
      for (auto it = by_free_.lower_bound({remaining, -1}); it != by_free_.end(); ++it) {
        if (ok(it->second)) return it->second;
      }
    }
    for (auto it = by_free_.lower_bound({need, -1}); it != by_free_.end(); ++it) {
      if (ok(it->second)) return it->second;
    }
    return -1;
  }

 private:
  std::set<std::pair<int, int>> by_free_;
  std::vector<int> free_;
  int64_t total_ = 0;
};

// A job's same-node groups in placement order (largest first, then by lowest rank), flattened.
struct Shape {
  int world = 0;
  int largest = 0;
  int64_t memory[2] = {0, 0};  // bytes per rank on a kCpu / kGpu slot; 0: not checked
  int64_t MemoryOn(const NodeCapacity& node) const { return memory[KindOf(node.gpu)]; }
  bool SameMemory() const { return memory[kCpu] == memory[kGpu]; }
  std::vector<int> members;                 // the ranks of each group, ascending, group by group
  std::vector<std::pair<int, int>> groups;  // (offset into members, size)
  std::string key;                          // group sizes and memory: equal keys place alike
  std::vector<char> seen;                   // scratch
};

// Fills `sh` from `job` (scheduler_demand.cc). INVALID_ARGUMENT when the demand is malformed:
// world size out of range, a group rank out of range or listed twice.
absl::Status BuildShape(const JobDemand& job, Shape* sh);

struct Node {
  NodeCapacity cap;
  std::vector<int> owner;      // per slot: a job handle, kFree, kBlocked or kProbe
  std::vector<char> reserved;  // held slot in the head's reservation (during a pass only)
  int free = 0;                // slots below cap.slots whose owner is kFree
};

// Whether a shape fits the cluster with its nodes empty: all nodes, or the schedulable ones.
struct Verdict {
  bool fits_all[2] = {false, false};
  bool fits_schedulable[2] = {false, false};
};

// The head job's reservation during one pass.
struct Reservation {
  bool active = false;
  int kind = kGpu;
  const JobDemand* job = nullptr;
  std::vector<std::pair<int, int>> blocked;  // (node, slot) free slots, owner set to kBlocked
  std::vector<std::pair<int, int>> held;     // (node, slot) held by running jobs, marked reserved
  std::vector<int> waits;                    // handles of the running jobs it waits for
  std::vector<int> nodes;
};

enum class Why { kNoNodes, kInfeasible, kUnschedulable, kNoReservation, kHead, kBehind, kSlots };

struct FailInfo {
  Why why = Why::kSlots;
  int kind = kGpu;
  std::string text;  // kInfeasible: the reason; kHead: the whole line
};

}  // namespace scheduler_internal

struct Scheduler::State {
  using FailInfo = scheduler_internal::FailInfo;
  using FreeIndex = scheduler_internal::FreeIndex;
  using Node = scheduler_internal::Node;
  using Reservation = scheduler_internal::Reservation;
  using Shape = scheduler_internal::Shape;
  using Verdict = scheduler_internal::Verdict;

  std::vector<Node> nodes;  // sorted by node id
  std::unordered_map<std::string, int> node_index;
  FreeIndex index[2];  // schedulable nodes of each kind (kCpu, kGpu)
  int64_t epoch = 0;   // bumped on every node change
  int64_t version = 0;  // bumped on every change of nodes or allocations

  // What the last pass left, for ScheduleAppended: valid while `version` is `settled_version`
  // and that pass placed nothing (a pass that places can change the head's reservation).
  bool settled = false;
  int64_t settled_version = -1;
  std::optional<JobDemand> tail;  // the job the pass considered last
  std::optional<JobDemand> head;  // the job that held the reservation
  Reservation head_res;           // its slots (job unset), to apply again unchanged

  // Allocations. A job is a small integer handle in the slot owner arrays.
  std::unordered_map<std::string, int> job_handle;
  std::vector<std::string> handle_job;
  std::vector<std::vector<SlotRef>> handle_ranks;
  std::vector<int> free_handles;

  // Verdicts by shape key, valid for `verdict_epoch`.
  mutable std::unordered_map<std::string, Verdict> verdicts;
  mutable int64_t verdict_epoch = -1;

  // Scratch of one pass.
  Shape shape;
  std::vector<SlotRef> ranks;
  std::vector<std::pair<int, int>> taken;
  std::vector<int> used;        // nodes a placement uses that still have free slots
  std::vector<char> pack_mark;  // per node: used by the placement being made
  std::vector<int> pack_marked;
  std::vector<char> res_mark;  // per node: in the head's reservation
  std::vector<int> res_count;  // per node: its slots in the head's reservation
  std::vector<int> res_marked;
  std::vector<char> wait_mark;  // per handle: the head waits for that job

  // ---- nodes and jobs (scheduler.cc) -----------------------------------------------------
  void Refresh(int n);
  void Recount(Node& node);
  void Rebuild();
  int PeekHandle() const;
  void Commit(const std::string& job_id, const std::vector<SlotRef>& job_ranks);

  // ---- placement on free slots (scheduler_placement.cc) ----------------------------------
  static void Mark(int n, std::vector<char>* mark, std::vector<int>* marked) {
    if ((*mark)[n]) return;
    (*mark)[n] = 1;
    marked->push_back(n);
  }
  static void ClearMarks(std::vector<char>* mark, std::vector<int>* marked) {
    for (int n : *marked) (*mark)[n] = 0;
    marked->clear();
  }

  // Places `sh` on free slots of `kind` for `owner`: fills `ranks` and appends to `taken`.
  // All or nothing: on failure the slots taken so far are given back.
  bool Pack(const Shape& sh, int kind, int owner, std::vector<SlotRef>* out,
            std::vector<std::pair<int, int>>* taken_slots);
  void Unpack(const std::vector<std::pair<int, int>>& slots);

  // ---- the head's reservation (scheduler_placement.cc) -----------------------------------
  void Block(int n, int count, Reservation* r);
  void SetBlocked(const Reservation& r, bool blocked);
  // The slots `sh` would take on `kind` if running jobs finished, chosen group by group: free
  // slots when a node still has room (best fit), else the node that adds the fewest running
  // jobs to wait for, then takes the fewest held slots, then is already in the reservation,
  // then leaves the least room. Blocks the free slots it takes. False if a group has no node.
  bool ReserveHead(const Shape& sh, int kind, Reservation* r);
  void EndReservation(Reservation* r);
  // Makes `saved` (a reservation ReserveHead made and EndReservation lifted, nothing changed
  // since) the head's reservation again without searching the nodes: O(its slots), not
  // O(nodes). False, changing nothing, if a slot it blocked is no longer free.
  bool Reapply(const Reservation& saved, Reservation* r);
  // ReserveHead calls that searched the nodes (for tests: ScheduleAppended makes none).
  int64_t reservation_searches = 0;
  // Whether `sh` would fit on free slots if the head's reservation were lifted.
  bool FitsWithReservation(const Shape& sh, int kind, const Reservation& r);

  // ---- feasibility (scheduler_demand.cc) -------------------------------------------------
  // Whether `sh` fits on the nodes of `kind` (all, or the schedulable ones) if they were empty,
  // by the same best-fit placement as Pack.
  bool FitsEmpty(const Shape& sh, int kind, bool schedulable_only) const;
  Verdict VerdictFor(const Shape& sh) const;
  // Why `sh` fits on neither kind of node even when the cluster is empty.
  std::string Infeasibility(const Shape& sh) const;

  // ---- reasons (scheduler_demand.cc) -----------------------------------------------------
  std::string ForSlots(const Shape& sh, int kind, const Reservation& r) const;
  std::string HeadClause(const Reservation& r) const;
  FailInfo Classify(const JobDemand& job, const Shape& sh, Reservation* head);
  std::string Reason(const JobDemand& job, const Shape& sh, const FailInfo& f,
                     const Reservation& head) const;

  // ---- a pass (scheduler.cc) ---------------------------------------------------------------
  // Places `sh` (layout `layout` of `job`) on free slots, GPU slots first, and records it.
  bool TryPack(const JobDemand& job, const Shape& sh, int layout, const Reservation& head,
               ScheduleResult* out);
  // Places `job` or says why it waits, as the pass's loop does at that point of the order.
  void Decide(const JobDemand& job, Reservation* head,
              std::unordered_map<std::string, FailInfo>* failed, ScheduleResult* out);
  // Ends the pass: records what ScheduleAppended needs, then lifts the reservation.
  void EndPass(const JobDemand* last, Reservation* head, const ScheduleResult& out);
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_SCHEDULER_INTERNAL_H_
