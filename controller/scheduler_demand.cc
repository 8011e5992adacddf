// Scheduler demands (scheduler.h): DemandForSpec, a demand's Shape, whether a shape could ever
// run on the cluster (CheckFeasible), and the one-line reasons of ScheduleResult::waiting.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_layout.h"
#include "common/layout.h"
#include "common/memory_plan.h"
#include "common/model_presets.h"
#include "controller/scheduler.h"
#include "controller/scheduler_internal.h"

namespace dhp::controller {

using scheduler_internal::FailInfo;
using scheduler_internal::FreeIndex;
using scheduler_internal::kCpu;
using scheduler_internal::kGpu;
using scheduler_internal::KindName;
using scheduler_internal::KindOf;
using scheduler_internal::MemoryOk;
using scheduler_internal::Node;
using scheduler_internal::Reservation;
using scheduler_internal::Shape;
using scheduler_internal::Verdict;
using scheduler_internal::Why;

namespace {

std::string GiB(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1LL << 30));
  return buf;
}

// "1 slot", "4 slots".
std::string Count(int64_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// " with a tensor-parallel group of 4 on one node", "" when every group is a single rank.
std::string GroupClause(const Shape& sh) {
  int multi = 0;
  bool mixed = false;
  for (const auto& [offset, size] : sh.groups) {
    if (size < 2) break;
    mixed |= size != sh.largest;
    ++multi;
  }
  if (multi == 0) return "";
  if (multi == 1)
    return absl::StrCat(" with a tensor-parallel group of ", sh.largest, " on one node");
  return absl::StrCat(" with tensor-parallel groups of ", mixed ? "up to " : "", sh.largest,
                      " on one node");
}

// ", 40.0 GiB per rank" on the slot kinds `present` (kCpu, kGpu); both when they differ:
// ", 40.0 GiB per GPU rank, 60.0 GiB per CPU rank". "" when not checked.
std::string MemoryClause(const Shape& sh, const bool present[2]) {
  if (present[kGpu] && present[kCpu] && !sh.SameMemory()) {
    std::string out;
    if (sh.memory[kGpu] > 0) absl::StrAppend(&out, ", ", GiB(sh.memory[kGpu]), " per GPU rank");
    if (sh.memory[kCpu] > 0) absl::StrAppend(&out, ", ", GiB(sh.memory[kCpu]), " per CPU rank");
    return out;
  }
  const int64_t m = sh.memory[present[kGpu] ? kGpu : kCpu];
  return m > 0 ? absl::StrCat(", ", GiB(m), " per rank") : "";
}
std::string MemoryClause(const Shape& sh, int kind) {
  const bool present[2] = {kind == kCpu, kind == kGpu};
  return MemoryClause(sh, present);
}

std::string JobList(const std::vector<std::string>& ids) {
  if (ids.size() == 1) return "job " + ids[0];
  std::string out = "jobs ";
  const size_t shown = std::min<size_t>(ids.size(), 3);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += (i + 1 == shown && shown == ids.size()) ? " and " : ", ";
    out += ids[i];
  }
  if (shown < ids.size()) absl::StrAppend(&out, " and ", ids.size() - shown, " more");
  return out;
}

}  // namespace

// ---- DemandForSpec -----------------------------------------------------------------------

std::optional<MemoryPlan> MemoryPlanForSpec(const v1::JobSpec& spec, PlanDevice device) {
  // The controller reads no model directory: a spec naming one has its preset checked against
  // it by the ranks (ResolveSpecModel), so the preset is the architecture when there is one.
  const ModelPreset* preset = FindModelPreset(spec.model().preset());
  if (preset == nullptr) return std::nullopt;
  absl::StatusOr<MemoryPlan> plan = PlanMemory(spec, *preset, device);
  if (!plan.ok()) return std::nullopt;
  return *std::move(plan);
}

JobDemand DemandForSpec(const std::string& job_id, const v1::JobSpec& spec, int64_t submit_seq) {
  JobDemand d;
  d.job_id = job_id;
  d.priority = spec.priority();
  d.submit_seq = submit_seq;
  const comm::Layout layout = LayoutForSpec(spec);
  if (!layout.Validate().ok()) return d;  // world_size 0: Schedule reports it as invalid
  if (std::optional<MemoryPlan> gpu = MemoryPlanForSpec(spec, PlanDevice::kGpu)) {
    d.memory_bytes_per_rank = gpu->PeakBytes();
  }
  // CPU slots are not checked. The planner's CPU bound is dominated by attention scores that
  // LibTorch materialises for a whole max_pixels image ([heads, L, L] per full-attention
  // segment: over 8 GiB per rank for the tiny model at the default 12.8 Mpixel limit), a worst case
  // that CPU runs (tests, development) rarely reach, while a CPU slot's "memory" is only the
  // host's RAM divided by its slots. Gating on it refused the CPU demo with default data limits.
  // `dhpctl plan` still prints the CPU bound (PlanDevice::kCpu) for whoever wants it.
  d.cpu_memory_bytes_per_rank = 0;
  const int world = layout.WorldSize();
  d.world_size = world;
  std::vector<int> parent(world);
  std::iota(parent.begin(), parent.end(), 0);
  const auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const comm::GroupSpec& g : comm::AllGroups(layout)) {
    if (!absl::StartsWith(g.name, "text.tp") && !absl::StartsWith(g.name, "vision.tp")) continue;
    for (size_t i = 1; i < g.world_ranks.size(); ++i) {
      const int a = find(g.world_ranks[0]), b = find(g.world_ranks[i]);
      if (a != b) parent[std::max(a, b)] = std::min(a, b);
    }
  }
  std::vector<int> group_of(world, -1);
  for (int r = 0; r < world; ++r) {
    const int root = find(r);
    if (group_of[root] < 0) {
      group_of[root] = static_cast<int>(d.same_node_groups.size());
      d.same_node_groups.emplace_back();
    }
    d.same_node_groups[group_of[root]].push_back(r);
  }
  return d;
}

JobDemand DemandForLayouts(const std::string& job_id, const std::vector<v1::JobSpec>& layouts,
                           int64_t submit_seq) {
  if (layouts.empty()) return DemandForSpec(job_id, v1::JobSpec(), submit_seq);
  JobDemand d = DemandForSpec(job_id, layouts[0], submit_seq);
  for (size_t k = 1; k < layouts.size(); ++k) {
    d.alternatives.push_back(DemandForSpec(job_id, layouts[k], submit_seq));
  }
  return d;
}

// ---- shapes ------------------------------------------------------------------------------

absl::Status scheduler_internal::BuildShape(const JobDemand& job, Shape* sh) {
  if (job.world_size < 1 || job.world_size > kMaxWorld) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", job.job_id, ": world_size ", job.world_size, " must be in [1, ", kMaxWorld, "]"));
  }
  const int world = job.world_size;
  sh->world = world;
  sh->memory[kGpu] = std::max<int64_t>(0, job.memory_bytes_per_rank);
  sh->memory[kCpu] = job.cpu_memory_bytes_per_rank < 0 ? sh->memory[kGpu]
                                                       : job.cpu_memory_bytes_per_rank;
  sh->seen.assign(world, 0);
  sh->members.clear();
  sh->groups.clear();
  for (const std::vector<int>& g : job.same_node_groups) {
    if (g.empty()) continue;
    const int offset = static_cast<int>(sh->members.size());
    for (int r : g) {
      if (r < 0 || r >= world) {
        return absl::InvalidArgumentError(absl::StrCat("job ", job.job_id,
                                                       ": same_node_groups: rank ", r,
                                                       " is out of range [0, ", world, ")"));
      }
      if (sh->seen[r]) {
        return absl::InvalidArgumentError(
            absl::StrCat("job ", job.job_id, ": same_node_groups: rank ", r, " is listed twice"));
      }
      sh->seen[r] = 1;
      sh->members.push_back(r);
    }
    std::sort(sh->members.begin() + offset, sh->members.end());
    sh->groups.push_back({offset, static_cast<int>(g.size())});
  }
  for (int r = 0; r < world; ++r) {
    if (sh->seen[r]) continue;
    sh->groups.push_back({static_cast<int>(sh->members.size()), 1});
    sh->members.push_back(r);
  }
  std::sort(sh->groups.begin(), sh->groups.end(),
            [&](const std::pair<int, int>& a, const std::pair<int, int>& b) {
              if (a.second != b.second) return a.second > b.second;
              return sh->members[a.first] < sh->members[b.first];
            });
  sh->largest = sh->groups.front().second;
  sh->key.clear();
  for (size_t i = 0; i < sh->groups.size();) {
    size_t j = i;
    while (j < sh->groups.size() && sh->groups[j].second == sh->groups[i].second) ++j;
    absl::StrAppend(&sh->key, sh->groups[i].second, "x", j - i, ",");
    i = j;
  }
  absl::StrAppend(&sh->key, "m", sh->memory[kGpu], "/", sh->memory[kCpu]);
  return absl::OkStatus();
}

// ---- feasibility -------------------------------------------------------------------------

bool Scheduler::State::FitsEmpty(const Shape& sh, int kind, bool schedulable_only) const {
  FreeIndex idx;
  idx.Reset(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeCapacity& c = nodes[i].cap;
    if (KindOf(c.gpu) != kind || c.slots <= 0 || (schedulable_only && !c.schedulable)) continue;
    if (MemoryOk(c, sh.memory[kind])) idx.Set(static_cast<int>(i), c.slots);
  }
  if (idx.total() < sh.world || idx.max_free() < sh.largest) return false;
  std::vector<int> in_use;
  const auto ok = [](int) { return true; };
  int remaining = sh.world;
  for (const auto& [offset, size] : sh.groups) {
    const int n = idx.BestFit(size, remaining, in_use, ok);
    remaining -= size;
    if (n < 0) return false;
    idx.Set(n, idx.Free(n) - size);
    if (std::find(in_use.begin(), in_use.end(), n) == in_use.end()) in_use.push_back(n);
    if (idx.Free(n) == 0) in_use.erase(std::find(in_use.begin(), in_use.end(), n));
  }
  return true;
}

Verdict Scheduler::State::VerdictFor(const Shape& sh) const {
  if (verdict_epoch != epoch || verdicts.size() > 4096) {
    verdicts.clear();
    verdict_epoch = epoch;
  }
  auto it = verdicts.find(sh.key);
  if (it != verdicts.end()) return it->second;
  Verdict v;
  for (int kind : {kCpu, kGpu}) {
    v.fits_all[kind] = FitsEmpty(sh, kind, false);
    v.fits_schedulable[kind] = v.fits_all[kind] && FitsEmpty(sh, kind, true);
  }
  verdicts.emplace(sh.key, v);
  return v;
}

std::string Scheduler::State::Infeasibility(const Shape& sh) const {
  bool present[2] = {false, false};
  if (sh.memory[kCpu] > 0 || sh.memory[kGpu] > 0) {
    bool any = false;
    int64_t largest[2] = {0, 0};
    for (const Node& n : nodes) {
      if (n.cap.slots <= 0) continue;
      const int k = KindOf(n.cap.gpu);
      present[k] = true;
      any |= MemoryOk(n.cap, sh.MemoryOn(n.cap));
      largest[k] = std::max(largest[k], n.cap.memory_bytes_per_slot);
    }
    if (!any) {
      if (present[kGpu] && present[kCpu] && !sh.SameMemory()) {
        return absl::StrCat("needs ", GiB(sh.memory[kGpu]), " per rank on a GPU and ",
                            GiB(sh.memory[kCpu]), " on a CPU slot; the largest GPU has ",
                            GiB(largest[kGpu]), " and the largest CPU slot ", GiB(largest[kCpu]));
      }
      const int k = present[kGpu] ? kGpu : kCpu;
      return absl::StrCat("needs ", GiB(sh.memory[k]), " per rank; the largest device has ",
                          GiB(std::max(largest[kGpu], largest[kCpu])));
    }
  }
  int64_t total[2] = {0, 0};
  int largest[2] = {0, 0};
  bool filtered[2] = {false, false};
  for (const Node& n : nodes) {
    if (n.cap.slots <= 0) continue;
    const int k = KindOf(n.cap.gpu);
    present[k] = true;
    if (!MemoryOk(n.cap, sh.memory[k])) {
      filtered[k] = true;
      continue;
    }
    total[k] += n.cap.slots;
    largest[k] = std::max(largest[k], n.cap.slots);
  }
  const auto describe = [&](int k, const char* has, const char* its) {
    std::string d = absl::StrCat(has, Count(total[k], "slot"),
                                 filtered[k] ? absl::StrCat(" with ", GiB(sh.memory[k])) : "",
                                 " and ", its, largest[k]);
    if (total[k] >= sh.world && largest[k] >= sh.largest)
      d += ", onto which the groups do not pack";
    return d;
  };
  std::string out =
      absl::StrCat("needs ", Count(sh.world, "rank slot"), GroupClause(sh),
                   MemoryClause(sh, present), "; ");
  if (present[kGpu] && present[kCpu]) {
    return out + describe(kGpu, "its GPU nodes have ", "the largest ") + "; " +
           describe(kCpu, "its CPU nodes have ", "the largest ");
  }
  return out + describe(present[kGpu] ? kGpu : kCpu, "the cluster has ", "its largest node ");
}

// ---- reasons -----------------------------------------------------------------------------

std::string Scheduler::State::ForSlots(const Shape& sh, int kind, const Reservation& r) const {
  int64_t free = index[kind].total();
  int max_free = index[kind].max_free();
  if (sh.memory[kind] > 0) {  // count only the slots with enough memory
    free = 0;
    max_free = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const int f = index[kind].Free(static_cast<int>(i));
      if (f <= 0 || !MemoryOk(nodes[i].cap, sh.memory[kind])) continue;
      free += f;
      max_free = std::max(max_free, f);
    }
  }
  std::string m =
      absl::StrCat("waiting for ", sh.world, " free ", KindName(kind),
                   sh.world == 1 ? " slot" : " slots", GroupClause(sh), MemoryClause(sh, kind),
                   " (cluster has ", free, " free",
                   sh.memory[kind] > 0 ? " with enough memory" : "");
  if (free >= sh.world && sh.largest > 1) {
    absl::StrAppend(&m, ", at most ", max_free, " on one node");
  }
  if (r.active && r.kind == kind && !r.blocked.empty()) {
    absl::StrAppend(&m, ", plus ", r.blocked.size(), " reserved for job ", r.job->job_id);
  }
  return m + ")";
}

std::string Scheduler::State::HeadClause(const Reservation& r) const {
  std::vector<std::string> ids;
  for (int h : r.waits) ids.push_back(handle_job[h]);
  const size_t slots = r.blocked.size() + r.held.size();
  std::string m = absl::StrCat("; holds a reservation of ", slots, " ", KindName(r.kind),
                               slots == 1 ? " slot" : " slots", " on ",
                               Count(r.nodes.size(), "node"), " (", r.blocked.size(), " free now)");
  if (!ids.empty()) {
    absl::StrAppend(&m, " until ", JobList(ids), ids.size() == 1 ? " finishes" : " finish");
  }
  return m;
}

FailInfo Scheduler::State::Classify(const JobDemand& job, const Shape& sh, Reservation* head) {
  if (nodes.empty()) return {Why::kNoNodes, kGpu, ""};
  const Verdict v = VerdictFor(sh);
  if (!v.fits_all[kCpu] && !v.fits_all[kGpu]) return {Why::kInfeasible, kGpu, Infeasibility(sh)};
  const int kind = v.fits_schedulable[kGpu] ? kGpu : v.fits_schedulable[kCpu] ? kCpu : -1;
  if (kind < 0) return {Why::kUnschedulable, v.fits_all[kGpu] ? kGpu : kCpu, ""};
  if (!head->active) {
    std::string text = ForSlots(sh, kind, *head);
    head->job = &job;
    if (ReserveHead(sh, kind, head)) return {Why::kHead, kind, text + HeadClause(*head)};
    EndReservation(head);
    return {Why::kNoReservation, kind, ""};
  }
  if (FitsWithReservation(sh, kind, *head)) return {Why::kBehind, kind, ""};
  return {Why::kSlots, kind, ""};
}

std::string Scheduler::State::Reason(const JobDemand& job, const Shape& sh, const FailInfo& f,
                                     const Reservation& head) const {
  switch (f.why) {
    case Why::kNoNodes:
      return "waiting for nodes: none has registered yet";
    case Why::kInfeasible:
      return "cannot run on this cluster: " + f.text;
    case Why::kUnschedulable: {
      int lost = 0;
      for (const Node& n : nodes) lost += !n.cap.schedulable;
      return absl::StrCat(ForSlots(sh, f.kind, head),
                          "; it does not fit on the schedulable nodes even when they are empty (",
                          lost, " of ", nodes.size(), " nodes are not schedulable)");
    }
    case Why::kNoReservation:
      return ForSlots(sh, f.kind, head) + "; no reservation could be made for it";
    case Why::kHead:
      return f.text;
    case Why::kBehind:
      if (head.job->priority > job.priority) {
        return "behind higher-priority job " + head.job->job_id + ", which holds a reservation";
      }
      return "behind job " + head.job->job_id +
             " (same priority, submitted earlier), which holds a reservation";
    case Why::kSlots:
      return ForSlots(sh, f.kind, head);
  }
  return "";
}

}  // namespace dhp::controller
