// Scheduler placement (scheduler.h, "Policy"): a job's same-node groups onto the free slots of
// one kind, largest first, each best fit (FreeIndex::BestFit), slots in index order; and the
// reservation of the head job, the slots it would take if running jobs finished.
#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "controller/scheduler.h"
#include "controller/scheduler_internal.h"

namespace dhp::controller {

using scheduler_internal::FreeIndex;
using scheduler_internal::kBlocked;
using scheduler_internal::kFree;
using scheduler_internal::KindOf;
using scheduler_internal::kProbe;
using scheduler_internal::MemoryOk;
using scheduler_internal::Node;
using scheduler_internal::Reservation;
using scheduler_internal::Shape;

// ---- placement on free slots -------------------------------------------------------------

bool Scheduler::State::Pack(const Shape& sh, int kind, int owner, std::vector<SlotRef>* out,
                            std::vector<std::pair<int, int>>* taken_slots) {
  FreeIndex& idx = index[kind];
  if (idx.total() < sh.world || idx.max_free() < sh.largest) return false;
  out->resize(sh.world);
  used.clear();
  const auto ok = [&](int n) { return MemoryOk(nodes[n].cap, sh.memory[kind]); };
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

void Scheduler::State::Unpack(const std::vector<std::pair<int, int>>& slots) {
  for (const auto& [n, s] : slots) {
    nodes[n].owner[s] = kFree;
    ++nodes[n].free;
  }
  for (const auto& [n, s] : slots) {
    if (index[KindOf(nodes[n].cap.gpu)].Free(n) != nodes[n].free) Refresh(n);
  }
}

// ---- the head's reservation --------------------------------------------------------------

void Scheduler::State::Block(int n, int count, Reservation* r) {
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

void Scheduler::State::SetBlocked(const Reservation& r, bool blocked) {
  for (const auto& [n, s] : r.blocked) {
    nodes[n].owner[s] = blocked ? kBlocked : kFree;
    nodes[n].free += blocked ? -1 : 1;
  }
  for (const auto& [n, s] : r.blocked) {
    if (index[r.kind].Free(n) != nodes[n].free) index[r.kind].Set(n, nodes[n].free);
  }
}

bool Scheduler::State::ReserveHead(const Shape& sh, int kind, Reservation* r) {
  ++reservation_searches;
  r->kind = kind;
  wait_mark.assign(handle_job.size(), 0);
  FreeIndex& idx = index[kind];
  const auto ok = [&](int n) { return MemoryOk(nodes[n].cap, sh.memory[kind]); };
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

bool Scheduler::State::Reapply(const Reservation& saved, Reservation* r) {
  for (const auto& [n, s] : saved.blocked) {
    if (nodes[n].owner[s] != kFree) return false;
  }
  wait_mark.assign(handle_job.size(), 0);
  *r = saved;
  SetBlocked(*r, true);
  for (const auto& [n, s] : r->blocked) ++res_count[n];
  for (const auto& [n, s] : r->held) {
    nodes[n].reserved[s] = 1;
    ++res_count[n];
  }
  for (int h : r->waits) wait_mark[h] = 1;
  for (int n : r->nodes) Mark(n, &res_mark, &res_marked);
  return true;
}

void Scheduler::State::EndReservation(Reservation* r) {
  SetBlocked(*r, false);
  for (const auto& [n, s] : r->held) nodes[n].reserved[s] = 0;
  for (int n : res_marked) res_count[n] = 0;
  ClearMarks(&res_mark, &res_marked);
  *r = Reservation();
}

bool Scheduler::State::FitsWithReservation(const Shape& sh, int kind, const Reservation& r) {
  if (!r.active || r.kind != kind || r.blocked.empty()) return false;
  SetBlocked(r, false);
  std::vector<SlotRef> probe;
  std::vector<std::pair<int, int>> probe_taken;
  const bool fits = Pack(sh, kind, kProbe, &probe, &probe_taken);
  if (fits) Unpack(probe_taken);
  SetBlocked(r, true);
  return fits;
}

}  // namespace dhp::controller
