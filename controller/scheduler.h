// Scheduler: places gang-scheduled training jobs onto the rank slots (GPUs or CPU rank slots)
// of the registered nodes. A pure in-memory library: no store, no I/O, no clock. The Controller
// feeds it node capacities and the queue, persists the placements it returns, and calls
// Reserve() after a restart to re-record the placements of jobs that were already running.
//
// Policy, one Schedule() pass:
//   * Jobs are considered by (priority desc, submit_seq asc, job_id asc).
//   * Gang: a job gets all of its world ranks or nothing. All ranks of a job are on one slot
//     kind; GPU slots are tried first, CPU slots when the job does not fit on free GPUs.
//   * Same-node groups (tensor-parallel groups) must each sit on one node. To use the fewest
//     nodes, groups are placed largest first, each best fit: onto the node the job already uses
//     with the fewest free slots that still hold the group; else onto a new node: the one with
//     the fewest free slots that holds ALL the job's remaining ranks if there is one (so an
//     8-rank job takes one node with 8 free rather than a node with 2 free plus another), else
//     the one with the fewest free slots that holds the group. Ties: the node id that sorts
//     first. Slots are taken in index order, so a job's ranks on one node get consecutive GPU
//     indices.
//   * Memory: when both the job's memory per rank on the slot's kind (JobDemand::
//     memory_bytes_per_rank on GPU slots, cpu_memory_bytes_per_rank on CPU slots) and
//     NodeCapacity::memory_bytes_per_slot are > 0, the node's slots must have at least that much.
//   * Backfill: the first job that does not fit (and could run on the schedulable nodes if
//     they were empty) becomes the head. It gets a reservation: the slots it would take if the
//     running jobs' slots were free, chosen to need the fewest running jobs to finish (then the
//     most slots free now, then best fit). Every later job is placed only on free slots outside
//     that reservation (PlacementDecision::backfilled), so it never takes a slot the head is
//     waiting for. Only ONE job holds a reservation per pass: a second reservation could only
//     be honoured by keeping even more slots idle, and the head is recomputed every pass anyway
//     (reservations are not remembered between passes). Jobs that can never run, or that need
//     nodes that are not schedulable now, do not become the head.
//   * Nodes that are not schedulable (LOST) keep their allocations but get no new ones.
//
// Cost: free slots are indexed per slot kind by (free count, node), so a group's best fit is a
// lower_bound; a pass costs about O(jobs log jobs + placed ranks x log nodes), plus, for the
// head's reservation, a scan of the nodes for each of its groups that finds no free room. A
// job whose shape (group sizes and memory) already failed in this pass is not tried again
// (free slots only shrink during a pass). bench/scheduler_bench.cc measures it.
//
// Thread-safety: not thread-safe; the Controller calls it only on its loop thread.
#ifndef DHP_CONTROLLER_SCHEDULER_H_
#define DHP_CONTROLLER_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/memory_plan.h"
#include "dhp/v1/job_spec.pb.h"

namespace dhp::controller {

// One rank slot: a GPU index of a GPU node, or a CPU rank slot index of a CPU node.
struct SlotRef {
  std::string node_id;
  int slot = 0;
  bool gpu = false;
  bool operator==(const SlotRef& o) const {
    return node_id == o.node_id && slot == o.slot && gpu == o.gpu;
  }
  bool operator!=(const SlotRef& o) const { return !(*this == o); }
};

struct NodeCapacity {
  std::string node_id;
  bool gpu = false;  // offers GPUs (slots = GPU indices 0..slots-1) or CPU rank slots
  int slots = 0;
  int64_t memory_bytes_per_slot = 0;  // 0: unknown (not checked)
  bool schedulable = true;            // false (node LOST): keeps its allocations, gets no new ones
};

struct JobDemand {
  std::string job_id;
  int priority = 0;        // higher first
  int64_t submit_seq = 0;  // FIFO within a priority (lower first)
  int world_size = 0;
  // A partition of [0, world_size): each group must sit on ONE node. Ranks not listed are
  // groups of their own (so an empty list means "no constraint").
  std::vector<std::vector<int>> same_node_groups;
  // Bytes each rank needs on a GPU slot (the GPU's memory); 0: not checked.
  int64_t memory_bytes_per_rank = 0;
  // Bytes each rank needs on a CPU slot (host memory / CPU slots); 0: not checked; negative:
  // memory_bytes_per_rank.
  int64_t cpu_memory_bytes_per_rank = -1;
  // Elastic jobs: other layouts of the same job (same job_id, priority and submit_seq; their own
  // alternatives are ignored), tried in order after this one, on free slots. The job waits,
  // reserves and is checked for feasibility as its LAST layout (the smallest one): it starts
  // as soon as that fits, and a larger layout is taken when the free slots hold it.
  std::vector<JobDemand> alternatives;
};

// The demand of a normalised spec (common/spec_validate.h): world size from LayoutForSpec;
// same-node groups = the ranks of each tensor-parallel group ("text.tp<d>", and "vision.tp<d>"
// under vision tensor parallelism) merged with any group they overlap; every other rank is a
// group of its own. Ulysses "vision.sp<d>" groups are NOT forced onto one node. Groups are
// listed by their lowest rank, members ascending. Priority comes from spec.priority(). Memory
// per rank on a GPU is the memory planner's peak (common/memory_plan.h) when the spec names a
// preset; 0 (not checked) when only a model directory names the architecture (the controller
// cannot read it) or the planner refuses the spec. CPU slots are not checked
// (cpu_memory_bytes_per_rank 0; scheduler_demand.cc says why).
JobDemand DemandForSpec(const std::string& job_id, const v1::JobSpec& spec, int64_t submit_seq);

// The demand of a job that may run on any of `layouts` (common/elastic.h ElasticLayouts, largest
// first): DemandForSpec of the first, the others as its alternatives, in order.
JobDemand DemandForLayouts(const std::string& job_id, const std::vector<v1::JobSpec>& layouts,
                           int64_t submit_seq);

// The memory planner's estimate behind DemandForSpec's memory on `device`; nullopt when there is
// none (no preset, or the planner refuses the spec).
std::optional<MemoryPlan> MemoryPlanForSpec(const v1::JobSpec& spec, PlanDevice device);

struct PlacementDecision {
  std::string job_id;
  std::vector<SlotRef> ranks;  // index = world rank
  bool backfilled = false;     // placed behind a head job that holds a reservation
  int layout = 0;              // 0: the demand itself; k: its alternatives[k - 1]
};

struct ScheduleResult {
  std::vector<PlacementDecision> placed;  // in the order they were placed
  // Job id -> why it is not placed, one line, e.g.
  //   "waiting for 4 free CPU slots with a tensor-parallel group of 2 on one node (cluster has
  //    1 free)"
  //   "behind higher-priority job j-abc, which holds a reservation"
  std::map<std::string, std::string> waiting;
};

class Scheduler {
 public:
  Scheduler();
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Adds a node or updates one (capacity, schedulable). Allocations are kept: when `slots`
  // shrinks below a held slot, that slot stays held until its job is released and then goes.
  void UpsertNode(const NodeCapacity& node);
  // Forgets the node and its slots. Jobs that held slots there keep them in AllocationOf()
  // until Release() (the Controller fails or restarts them); a node registered again under the
  // same id starts empty.
  void RemoveNode(const std::string& node_id);

  // Records an existing placement (after a controller restart), on schedulable nodes or not.
  // FAILED_PRECONDITION naming the slot if its node is unknown, the index is out of range, the
  // slot kind differs from the node's, the slot is listed twice or held by another job, or the
  // job already holds a different allocation (the same one again is OK). INVALID_ARGUMENT for
  // no ranks. All or nothing.
  absl::Status Reserve(const std::string& job_id, const std::vector<SlotRef>& ranks);
  // Frees the job's slots; a no-op for a job that holds none.
  void Release(const std::string& job_id);

  // OK if the job could ever run: on the cluster with every node (schedulable or not) empty;
  // for an elastic job, in any of its layouts (the error is its smallest layout's).
  // Otherwise FAILED_PRECONDITION with the numbers, e.g. "needs 8 rank slots with tensor-
  // parallel groups of 4 on one node; the cluster has 6 slots and its largest node 2", or
  // "needs 40.0 GiB per rank; the largest device has 24.0 GiB". INVALID_ARGUMENT when the
  // demand itself is malformed (world size < 1, a group rank out of range or listed twice).
  // With no nodes registered at all it returns OK: the cluster is not known yet (a controller
  // that has just started has heard from no agent), and the job simply waits.
  absl::Status CheckFeasible(const JobDemand& job) const;
  // True when the slots of some registered node have less memory than the job needs per rank
  // there (so memory is part of why a job does not fit). False for a malformed demand.
  bool MemoryExcludesNodes(const JobDemand& job) const;

  // One scheduling pass over `queue` (see the header comment). Allocates the slots of every
  // placement it returns. Jobs of `queue` that already hold an allocation are skipped (neither
  // placed nor waiting); every other job is either placed or in `waiting` with a reason.
  ScheduleResult Schedule(const std::vector<JobDemand>& queue);
  // The pass for jobs added to the queue since the last Schedule() or ScheduleAppended(), when
  // no node or allocation changed since, that pass placed nothing, and every job of `appended`
  // comes after every job of that pass in the order: the decisions equal those of a full pass
  // over the whole queue (which would decide every earlier job as before), at the cost of the
  // appended jobs and the head's reservation instead of the whole queue. nullopt when it does
  // not apply: call Schedule() with the whole queue instead.
  std::optional<ScheduleResult> ScheduleAppended(const std::vector<JobDemand>& appended);

  int total_slots() const;  // slots of all registered nodes, schedulable or not
  int free_slots() const;   // slots a new job could get now: free, on schedulable nodes
  int used_slots() const;   // slots held by jobs (on registered nodes)
  int node_count() const;
  // How many times a pass searched the nodes for the head's reservation (O(nodes) each; tests
  // count them: ScheduleAppended applies the last pass's reservation again instead).
  int64_t reservation_searches() const;
  // The job's slots, index = world rank; empty if it holds none.
  std::vector<SlotRef> AllocationOf(const std::string& job_id) const;

 private:
  struct State;  // nodes, free-slot indexes, allocations (scheduler_internal.h)
  std::unique_ptr<State> s_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_SCHEDULER_H_
