#include "controller/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_layout.h"
#include "common/layout.h"

namespace dhp::controller {
namespace {

// Slot owners other than job handles (which are >= 0).
constexpr int kFree = -1;
constexpr int kBlocked = -2;  // free, but in the head's reservation (during a pass only)
constexpr int kProbe = -3;    // taken by a trial placement that is undone at once

constexpr int kCpu = 0;
constexpr int kGpu = 1;
constexpr int kMaxWorld = 1 << 20;  // a larger demand is a caller bug, reported as invalid

int KindOf(bool gpu) { return gpu ? kGpu : kCpu; }
const char* KindName(int kind) { return kind == kGpu ? "GPU" : "CPU"; }

std::string GiB(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1LL << 30));
  return buf;
}

std::string SlotName(const SlotRef& s) {
  return absl::StrCat(s.node_id, s.gpu ? " GPU " : " CPU slot ", s.slot);
}

// "1 slot", "4 slots".
std::string Count(int64_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

bool MemoryOk(const NodeCapacity& node, int64_t per_rank) {
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
  int64_t memory = 0;
  std::vector<int> members;                 // the ranks of each group, ascending, group by group
  std::vector<std::pair<int, int>> groups;  // (offset into members, size)
  std::string key;                          // group sizes and memory: equal keys place alike
  std::vector<char> seen;                   // scratch
};

absl::Status BuildShape(const JobDemand& job, Shape* sh) {
  if (job.world_size < 1 || job.world_size > kMaxWorld) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", job.job_id, ": world_size ", job.world_size, " must be in [1, ", kMaxWorld, "]"));
  }
  const int world = job.world_size;
  sh->world = world;
  sh->memory = std::max<int64_t>(0, job.memory_bytes_per_rank);
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
  absl::StrAppend(&sh->key, "m", sh->memory);
  return absl::OkStatus();
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

std::string MemoryClause(const Shape& sh) {
  return sh.memory > 0 ? absl::StrCat(", ", GiB(sh.memory), " per rank") : "";
}

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

struct Scheduler::State {
  std::vector<Node> nodes;  // sorted by node id
  std::unordered_map<std::string, int> node_index;
  FreeIndex index[2];  // schedulable nodes of each kind (kCpu, kGpu)
  int64_t epoch = 0;   // bumped on every node change

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

  // ---- nodes -----------------------------------------------------------------------------
  void Refresh(int n) {
    index[kCpu].Remove(n);
    index[kGpu].Remove(n);
    const Node& node = nodes[n];
    if (node.cap.schedulable) index[KindOf(node.cap.gpu)].Set(n, node.free);
  }
  void Recount(Node& node) {
    while (static_cast<int>(node.owner.size()) > node.cap.slots && node.owner.back() == kFree) {
      node.owner.pop_back();
    }
    if (static_cast<int>(node.owner.size()) < node.cap.slots)
      node.owner.resize(node.cap.slots, kFree);
    node.reserved.assign(node.owner.size(), 0);
    node.free = 0;
    for (int s = 0; s < node.cap.slots; ++s) node.free += node.owner[s] == kFree;
  }
  void Rebuild() {
    std::sort(nodes.begin(), nodes.end(),
              [](const Node& a, const Node& b) { return a.cap.node_id < b.cap.node_id; });
    node_index.clear();
    for (auto& idx : index) idx.Reset(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      node_index[nodes[i].cap.node_id] = static_cast<int>(i);
      Refresh(static_cast<int>(i));
    }
    pack_mark.assign(nodes.size(), 0);
    res_mark.assign(nodes.size(), 0);
    res_count.assign(nodes.size(), 0);
    ++epoch;
  }

  // ---- placement on free slots -----------------------------------------------------------
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
            std::vector<std::pair<int, int>>* taken_slots) {
    FreeIndex& idx = index[kind];
    if (idx.total() < sh.world || idx.max_free() < sh.largest) return false;
    out->resize(sh.world);
    used.clear();
    const auto ok = [&](int n) { return MemoryOk(nodes[n].cap, sh.memory); };
    int remaining = sh.world;
    for (const auto& [offset, size] : sh.groups) {
      const int n = idx.BestFit(size, remaining, used, ok);
      remaining -= size;
      if (n < 0) {
        ClearMarks(&pack_mark, &pack_marked);
        Unpack(*taken_slots);
        taken_slots->clear();
        return false;
      }
      Node& node = nodes[n];
      for (int s = 0, k = 0; k < size; ++s) {
        if (node.owner[s] != kFree) continue;
        node.owner[s] = owner;
        SlotRef& ref = (*out)[sh.members[offset + k]];
        ref.node_id = node.cap.node_id;
        ref.slot = s;
        ref.gpu = node.cap.gpu;
        taken_slots->push_back({n, s});
        ++k;
      }
      node.free -= size;
      idx.Set(n, node.free);
      if (!pack_mark[n]) {
        Mark(n, &pack_mark, &pack_marked);
        used.push_back(n);
      }
      if (node.free == 0) used.erase(std::find(used.begin(), used.end(), n));
    }
    ClearMarks(&pack_mark, &pack_marked);
    return true;
  }
  void Unpack(const std::vector<std::pair<int, int>>& slots) {
    for (const auto& [n, s] : slots) {
      nodes[n].owner[s] = kFree;
      ++nodes[n].free;
    }
    for (const auto& [n, s] : slots) {
      if (index[KindOf(nodes[n].cap.gpu)].Free(n) != nodes[n].free) Refresh(n);
    }
  }

  // ---- jobs ------------------------------------------------------------------------------
  int PeekHandle() const {
    return free_handles.empty() ? static_cast<int>(handle_job.size()) : free_handles.back();
  }
  void Commit(const std::string& job_id, const std::vector<SlotRef>& job_ranks) {
    int h;
    if (free_handles.empty()) {
      h = static_cast<int>(handle_job.size());
      handle_job.emplace_back();
      handle_ranks.emplace_back();
    } else {
      h = free_handles.back();
      free_handles.pop_back();
    }
    handle_job[h] = job_id;
    handle_ranks[h] = job_ranks;
    job_handle[job_id] = h;
  }

  // ---- feasibility -----------------------------------------------------------------------
  // Whether `sh` fits on the nodes of `kind` (all, or the schedulable ones) if they were empty,
  // by the same best-fit placement as Pack.
  bool FitsEmpty(const Shape& sh, int kind, bool schedulable_only) const {
    FreeIndex idx;
    idx.Reset(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      const NodeCapacity& c = nodes[i].cap;
      if (KindOf(c.gpu) != kind || c.slots <= 0 || (schedulable_only && !c.schedulable)) continue;
      if (MemoryOk(c, sh.memory)) idx.Set(static_cast<int>(i), c.slots);
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
  Verdict VerdictFor(const Shape& sh) const {
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
  // Why `sh` fits on neither kind of node even when the cluster is empty.
  std::string Infeasibility(const Shape& sh) const {
    if (sh.memory > 0) {
      bool any = false;
      int64_t largest = 0;
      for (const Node& n : nodes) {
        if (n.cap.slots <= 0) continue;
        any |= MemoryOk(n.cap, sh.memory);
        largest = std::max(largest, n.cap.memory_bytes_per_slot);
      }
      if (!any) {
        return absl::StrCat("needs ", GiB(sh.memory), " per rank; the largest device has ",
                            GiB(largest));
      }
    }
    int64_t total[2] = {0, 0};
    int largest[2] = {0, 0};
    bool present[2] = {false, false}, filtered = false;
    for (const Node& n : nodes) {
      if (n.cap.slots <= 0) continue;
      const int k = KindOf(n.cap.gpu);
      present[k] = true;
      if (!MemoryOk(n.cap, sh.memory)) {
        filtered = true;
        continue;
      }
      total[k] += n.cap.slots;
      largest[k] = std::max(largest[k], n.cap.slots);
    }
    const auto describe = [&](int k, const char* has, const char* its) {
      std::string d = absl::StrCat(has, Count(total[k], "slot"),
                                   filtered ? absl::StrCat(" with ", GiB(sh.memory)) : "", " and ",
                                   its, largest[k]);
      if (total[k] >= sh.world && largest[k] >= sh.largest)
        d += ", onto which the groups do not pack";
      return d;
    };
    std::string out = absl::StrCat("needs ", Count(sh.world, "rank slot"), GroupClause(sh),
                                   MemoryClause(sh), "; ");
    if (present[kGpu] && present[kCpu]) {
      return out + describe(kGpu, "its GPU nodes have ", "the largest ") + "; " +
             describe(kCpu, "its CPU nodes have ", "the largest ");
    }
    return out + describe(present[kGpu] ? kGpu : kCpu, "the cluster has ", "its largest node ");
  }

  // ---- the head's reservation -------------------------------------------------------------
  void Block(int n, int count, Reservation* r) {
    Node& node = nodes[n];
    for (int s = 0; count > 0 && s < node.cap.slots; ++s) {
      if (node.owner[s] != kFree) continue;
      node.owner[s] = kBlocked;
      --node.free;
      --count;
      ++res_count[n];
      r->blocked.push_back({n, s});
    }
    index[r->kind].Set(n, node.free);
  }
  void SetBlocked(const Reservation& r, bool blocked) {
    for (const auto& [n, s] : r.blocked) {
      nodes[n].owner[s] = blocked ? kBlocked : kFree;
      nodes[n].free += blocked ? -1 : 1;
    }
    for (const auto& [n, s] : r.blocked) {
      if (index[r.kind].Free(n) != nodes[n].free) index[r.kind].Set(n, nodes[n].free);
    }
  }

  // The slots `sh` would take on `kind` if running jobs finished, chosen group by group: free
  // slots when a node still has room (best fit), else the node that adds the fewest running
  // jobs to wait for, then takes the fewest held slots, then is already in the reservation,
  // then leaves the least room. Blocks the free slots it takes. False if a group has no node.
  bool ReserveHead(const Shape& sh, int kind, Reservation* r) {
    r->kind = kind;
    wait_mark.assign(handle_job.size(), 0);
    FreeIndex& idx = index[kind];
    const auto ok = [&](int n) { return MemoryOk(nodes[n].cap, sh.memory); };
    struct Holder {
      int handle, slots, first_slot;
    };
    std::vector<Holder> counts;  // the running jobs holding unreserved slots of one node
    const auto order_counts = [&](const Node& node) {
      counts.clear();
      for (int s = 0; s < node.cap.slots; ++s) {
        const int o = node.owner[s];
        if (o < 0 || node.reserved[s]) continue;
        auto it = std::find_if(counts.begin(), counts.end(),
                               [o](const Holder& c) { return c.handle == o; });
        if (it == counts.end()) {
          counts.push_back({o, 1, s});
        } else {
          ++it->slots;
        }
      }
      // Jobs already waited for first (free to wait for again), then the largest holders.
      std::sort(counts.begin(), counts.end(), [&](const Holder& a, const Holder& b) {
        if (wait_mark[a.handle] != wait_mark[b.handle]) return wait_mark[a.handle] > 0;
        if (a.slots != b.slots) return a.slots > b.slots;
        return a.first_slot < b.first_slot;
      });
    };
    std::vector<int> open;  // reservation nodes with free slots left (preferred by BestFit)
    int remaining = sh.world;
    for (const auto& [offset, size] : sh.groups) {
      int n = idx.BestFit(size, remaining, open, ok);
      remaining -= size;
      if (n >= 0) {
        Block(n, size, r);
      } else {
        std::tuple<int, int, int, int, int> best{};
        n = -1;
        for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
          const Node& node = nodes[i];
          // Slots not yet in the reservation are free or held by a running job.
          if (!node.cap.schedulable || KindOf(node.cap.gpu) != kind ||
              node.cap.slots - res_count[i] < size || !ok(i)) {
            continue;
          }
          order_counts(node);
          int held = 0;
          for (const Holder& c : counts) held += c.slots;
          if (node.free + held < size) continue;
          const int need = std::max(0, size - node.free);
          int fresh = 0;
          for (int covered = 0, j = 0; covered < need; ++j) {
            covered += counts[j].slots;
            fresh += !wait_mark[counts[j].handle];
          }
          std::tuple<int, int, int, int, int> cost{fresh, need, res_mark[i] ? 0 : 1,
                                                   node.free + held - size, i};
          if (n < 0 || cost < best) {
            best = cost;
            n = i;
          }
        }
        if (n < 0) return false;
        Node& node = nodes[n];
        const int need = std::max(0, size - node.free);
        Block(n, std::min(node.free, size), r);
        order_counts(node);
        int covered = 0;
        for (const Holder& c : counts) {
          if (covered >= need) break;
          const int h = c.handle;
          for (int s = 0; s < node.cap.slots && covered < need; ++s) {
            if (node.owner[s] != h || node.reserved[s]) continue;
            node.reserved[s] = 1;
            ++res_count[n];
            r->held.push_back({n, s});
            ++covered;
          }
          if (!wait_mark[h]) {
            wait_mark[h] = 1;
            r->waits.push_back(h);
          }
        }
      }
      if (!res_mark[n]) {
        Mark(n, &res_mark, &res_marked);
        r->nodes.push_back(n);
        open.push_back(n);
      }
      open.erase(std::remove_if(open.begin(), open.end(), [&](int m) { return idx.Free(m) <= 0; }),
                 open.end());
    }
    r->active = true;
    return true;
  }
  void EndReservation(Reservation* r) {
    SetBlocked(*r, false);
    for (const auto& [n, s] : r->held) nodes[n].reserved[s] = 0;
    for (int n : res_marked) res_count[n] = 0;
    ClearMarks(&res_mark, &res_marked);
    *r = Reservation();
  }
  // Whether `sh` would fit on free slots if the head's reservation were lifted.
  bool FitsWithReservation(const Shape& sh, int kind, const Reservation& r) {
    if (!r.active || r.kind != kind || r.blocked.empty()) return false;
    SetBlocked(r, false);
    std::vector<SlotRef> probe;
    std::vector<std::pair<int, int>> probe_taken;
    const bool fits = Pack(sh, kind, kProbe, &probe, &probe_taken);
    if (fits) Unpack(probe_taken);
    SetBlocked(r, true);
    return fits;
  }

  // ---- reasons ---------------------------------------------------------------------------
  std::string ForSlots(const Shape& sh, int kind, const Reservation& r) const {
    int64_t free = index[kind].total();
    int max_free = index[kind].max_free();
    if (sh.memory > 0) {  // count only the slots with enough memory
      free = 0;
      max_free = 0;
      for (size_t i = 0; i < nodes.size(); ++i) {
        const int f = index[kind].Free(static_cast<int>(i));
        if (f <= 0 || !MemoryOk(nodes[i].cap, sh.memory)) continue;
        free += f;
        max_free = std::max(max_free, f);
      }
    }
    std::string m =
        absl::StrCat("waiting for ", sh.world, " free ", KindName(kind),
                     sh.world == 1 ? " slot" : " slots", GroupClause(sh), MemoryClause(sh),
                     " (cluster has ", free, " free", sh.memory > 0 ? " with enough memory" : "");
    if (free >= sh.world && sh.largest > 1) {
      absl::StrAppend(&m, ", at most ", max_free, " on one node");
    }
    if (r.active && r.kind == kind && !r.blocked.empty()) {
      absl::StrAppend(&m, ", plus ", r.blocked.size(), " reserved for job ", r.job->job_id);
    }
    return m + ")";
  }
  std::string HeadClause(const Reservation& r) const {
    std::vector<std::string> ids;
    for (int h : r.waits) ids.push_back(handle_job[h]);
    const size_t slots = r.blocked.size() + r.held.size();
    std::string m = absl::StrCat(
        "; holds a reservation of ", slots, " ", KindName(r.kind), slots == 1 ? " slot" : " slots",
        " on ", Count(r.nodes.size(), "node"), " (", r.blocked.size(), " free now)");
    if (!ids.empty()) {
      absl::StrAppend(&m, " until ", JobList(ids), ids.size() == 1 ? " finishes" : " finish");
    }
    return m;
  }

  FailInfo Classify(const JobDemand& job, const Shape& sh, Reservation* head) {
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

  std::string Reason(const JobDemand& job, const Shape& sh, const FailInfo& f,
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
};

// ---- DemandForSpec -----------------------------------------------------------------------

JobDemand DemandForSpec(const std::string& job_id, const v1::JobSpec& spec, int64_t submit_seq) {
  JobDemand d;
  d.job_id = job_id;
  d.priority = spec.priority();
  d.submit_seq = submit_seq;
  const comm::Layout layout = LayoutForSpec(spec);
  if (!layout.Validate().ok()) return d;  // world_size 0: Schedule reports it as invalid
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

// ---- Scheduler ---------------------------------------------------------------------------

Scheduler::Scheduler() : s_(std::make_unique<State>()) {}
Scheduler::~Scheduler() = default;

void Scheduler::UpsertNode(const NodeCapacity& cap) {
  State& st = *s_;
  NodeCapacity c = cap;
  c.slots = std::max(0, c.slots);
  auto it = st.node_index.find(c.node_id);
  if (it != st.node_index.end()) {
    Node& node = st.nodes[it->second];
    node.cap = c;
    st.Recount(node);
    st.Refresh(it->second);
    ++st.epoch;
    return;
  }
  Node node;
  node.cap = c;
  st.Recount(node);
  const bool append = st.nodes.empty() || st.nodes.back().cap.node_id < c.node_id;
  st.nodes.push_back(std::move(node));
  if (!append) {
    st.Rebuild();
    return;
  }
  const int n = static_cast<int>(st.nodes.size()) - 1;
  st.node_index[c.node_id] = n;
  for (auto& idx : st.index) idx.Grow(st.nodes.size());
  st.pack_mark.resize(st.nodes.size(), 0);
  st.res_mark.resize(st.nodes.size(), 0);
  st.res_count.resize(st.nodes.size(), 0);
  st.Refresh(n);
  ++st.epoch;
}

void Scheduler::RemoveNode(const std::string& node_id) {
  State& st = *s_;
  auto it = st.node_index.find(node_id);
  if (it == st.node_index.end()) return;
  st.nodes.erase(st.nodes.begin() + it->second);
  st.Rebuild();
}

absl::Status Scheduler::Reserve(const std::string& job_id, const std::vector<SlotRef>& ranks) {
  State& st = *s_;
  if (ranks.empty()) {
    return absl::InvalidArgumentError("reserve job " + job_id + ": no ranks given");
  }
  if (auto it = st.job_handle.find(job_id); it != st.job_handle.end()) {
    if (st.handle_ranks[it->second] == ranks) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("reserve job ", job_id, ": it already holds ",
                                                      st.handle_ranks[it->second].size(),
                                                      " other slots; release them first"));
  }
  std::set<std::pair<int, int>> seen;
  for (const SlotRef& ref : ranks) {
    const std::string prefix = absl::StrCat("reserve job ", job_id, ": slot ", SlotName(ref));
    auto it = st.node_index.find(ref.node_id);
    if (it == st.node_index.end()) {
      return absl::FailedPreconditionError(prefix + ": node " + ref.node_id + " is not registered");
    }
    const Node& node = st.nodes[it->second];
    if (node.cap.gpu != ref.gpu) {
      return absl::FailedPreconditionError(absl::StrCat(prefix, ": node ", ref.node_id, " offers ",
                                                        node.cap.gpu ? "GPUs" : "CPU slots",
                                                        ", not ", ref.gpu ? "GPUs" : "CPU slots"));
    }
    if (ref.slot < 0 || ref.slot >= node.cap.slots) {
      return absl::FailedPreconditionError(absl::StrCat(prefix, ": node ", ref.node_id, " has ",
                                                        node.cap.slots,
                                                        node.cap.gpu ? " GPUs" : " CPU slots"));
    }
    if (!seen.insert({it->second, ref.slot}).second) {
      return absl::FailedPreconditionError(prefix + ": listed twice");
    }
    const int owner = node.owner[ref.slot];
    if (owner >= 0) {
      return absl::FailedPreconditionError(prefix + ": held by job " + st.handle_job[owner]);
    }
  }
  for (const auto& [n, s] : seen) {
    st.nodes[n].owner[s] = st.PeekHandle();
    --st.nodes[n].free;
    st.Refresh(n);
  }
  st.Commit(job_id, ranks);
  return absl::OkStatus();
}

void Scheduler::Release(const std::string& job_id) {
  State& st = *s_;
  auto it = st.job_handle.find(job_id);
  if (it == st.job_handle.end()) return;
  const int h = it->second;
  for (const SlotRef& ref : st.handle_ranks[h]) {
    auto n = st.node_index.find(ref.node_id);
    if (n == st.node_index.end()) continue;  // node removed meanwhile
    Node& node = st.nodes[n->second];
    if (ref.slot < 0 || ref.slot >= static_cast<int>(node.owner.size()) ||
        node.owner[ref.slot] != h) {
      continue;
    }
    node.owner[ref.slot] = kFree;
    if (ref.slot < node.cap.slots) {
      ++node.free;
    } else {
      st.Recount(node);  // the node shrank: the slot goes
    }
    st.Refresh(n->second);
  }
  st.job_handle.erase(it);
  st.handle_job[h].clear();
  st.handle_ranks[h].clear();
  st.free_handles.push_back(h);
}

absl::Status Scheduler::CheckFeasible(const JobDemand& job) const {
  Shape sh;
  if (absl::Status s = BuildShape(job, &sh); !s.ok()) return s;
  if (s_->nodes.empty()) return absl::OkStatus();  // cluster not known yet
  const Verdict v = s_->VerdictFor(sh);
  if (v.fits_all[kCpu] || v.fits_all[kGpu]) return absl::OkStatus();
  return absl::FailedPreconditionError(s_->Infeasibility(sh));
}

ScheduleResult Scheduler::Schedule(const std::vector<JobDemand>& queue) {
  State& st = *s_;
  ScheduleResult out;
  std::vector<const JobDemand*> order;
  order.reserve(queue.size());
  for (const JobDemand& j : queue) order.push_back(&j);
  std::sort(order.begin(), order.end(), [](const JobDemand* a, const JobDemand* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    if (a->submit_seq != b->submit_seq) return a->submit_seq < b->submit_seq;
    return a->job_id < b->job_id;
  });
  Reservation head;
  // Shapes that failed in this pass, with why. Free slots only shrink during a pass (and after
  // the head's reservation is made they shrink further), so a shape that failed fails again.
  std::unordered_map<std::string, FailInfo> failed;
  Shape& sh = st.shape;
  for (const JobDemand* job : order) {
    if (st.job_handle.count(job->job_id) > 0) continue;
    if (absl::Status s = BuildShape(*job, &sh); !s.ok()) {
      out.waiting[job->job_id] = absl::StrCat("invalid demand: ", s.message());
      continue;
    }
    auto it = failed.find(sh.key);
    if (it == failed.end()) {
      bool placed = false;
      for (int kind : {kGpu, kCpu}) {
        st.taken.clear();
        if (st.Pack(sh, kind, st.PeekHandle(), &st.ranks, &st.taken)) {
          placed = true;
          break;
        }
      }
      if (placed) {
        st.Commit(job->job_id, st.ranks);
        out.placed.push_back({job->job_id, st.ranks, head.active});
        continue;
      }
      FailInfo info = st.Classify(*job, sh, &head);
      if (info.why == Why::kHead) {
        out.waiting[job->job_id] = std::move(info.text);
        failed.clear();  // what failed before the reservation is classified again after it
        continue;
      }
      it = failed.emplace(sh.key, std::move(info)).first;
    }
    out.waiting[job->job_id] = st.Reason(*job, sh, it->second, head);
  }
  st.EndReservation(&head);
  return out;
}

int Scheduler::total_slots() const {
  int total = 0;
  for (const Node& n : s_->nodes) total += n.cap.slots;
  return total;
}

int Scheduler::free_slots() const {
  return static_cast<int>(s_->index[kCpu].total() + s_->index[kGpu].total());
}

int Scheduler::used_slots() const {
  int used = 0;
  for (const Node& n : s_->nodes) {
    for (int o : n.owner) used += o >= 0;
  }
  return used;
}

int Scheduler::node_count() const { return static_cast<int>(s_->nodes.size()); }

std::vector<SlotRef> Scheduler::AllocationOf(const std::string& job_id) const {
  auto it = s_->job_handle.find(job_id);
  if (it == s_->job_handle.end()) return {};
  return s_->handle_ranks[it->second];
}

}  // namespace dhp::controller
