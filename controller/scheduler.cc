// The Scheduler's public API (scheduler.h), its node and allocation bookkeeping, and the
// Schedule() pass. Placement is in scheduler_placement.cc; demands, feasibility and the waiting
// reasons are in scheduler_demand.cc; the shared State is in scheduler_internal.h.
#include "controller/scheduler.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/scheduler_internal.h"

namespace dhp::controller {

using scheduler_internal::BuildShape;
using scheduler_internal::FailInfo;
using scheduler_internal::kCpu;
using scheduler_internal::kFree;
using scheduler_internal::kGpu;
using scheduler_internal::KindOf;
using scheduler_internal::Node;
using scheduler_internal::Reservation;
using scheduler_internal::Shape;
using scheduler_internal::Verdict;
using scheduler_internal::Why;

namespace {

std::string SlotName(const SlotRef& s) {
  return absl::StrCat(s.node_id, s.gpu ? " GPU " : " CPU slot ", s.slot);
}

}  // namespace

// ---- State: nodes and jobs ---------------------------------------------------------------

void Scheduler::State::Refresh(int n) {
  index[kCpu].Remove(n);
  index[kGpu].Remove(n);
  const Node& node = nodes[n];
  if (node.cap.schedulable) index[KindOf(node.cap.gpu)].Set(n, node.free);
}

void Scheduler::State::Recount(Node& node) {
  while (static_cast<int>(node.owner.size()) > node.cap.slots && node.owner.back() == kFree) {
    node.owner.pop_back();
  }
  if (static_cast<int>(node.owner.size()) < node.cap.slots)
    node.owner.resize(node.cap.slots, kFree);
  node.reserved.assign(node.owner.size(), 0);
  node.free = 0;
  for (int s = 0; s < node.cap.slots; ++s) node.free += node.owner[s] == kFree;
}

void Scheduler::State::Rebuild() {
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
  ++version;
}

int Scheduler::State::PeekHandle() const {
  return free_handles.empty() ? static_cast<int>(handle_job.size()) : free_handles.back();
}

void Scheduler::State::Commit(const std::string& job_id, const std::vector<SlotRef>& job_ranks) {
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
  ++version;
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
    ++st.version;
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
  ++st.version;
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
  ++st.version;
  st.handle_job[h].clear();
  st.handle_ranks[h].clear();
  st.free_handles.push_back(h);
}

absl::Status Scheduler::CheckFeasible(const JobDemand& job) const {
  Shape sh;
  absl::Status last = absl::OkStatus();
  for (size_t k = 0; k <= job.alternatives.size(); ++k) {
    const JobDemand& layout = k == 0 ? job : job.alternatives[k - 1];
    if (absl::Status s = BuildShape(layout, &sh); !s.ok()) return s;
    if (s_->nodes.empty()) return absl::OkStatus();  // cluster not known yet
    const Verdict v = s_->VerdictFor(sh);
    if (v.fits_all[kCpu] || v.fits_all[kGpu]) return absl::OkStatus();
    last = absl::FailedPreconditionError(s_->Infeasibility(sh));
  }
  return last;
}

bool Scheduler::MemoryExcludesNodes(const JobDemand& job) const {
  Shape sh;
  if (!BuildShape(job, &sh).ok()) return false;
  for (const Node& n : s_->nodes) {
    if (n.cap.slots > 0 && !scheduler_internal::MemoryOk(n.cap, sh.MemoryOn(n.cap))) return true;
  }
  return false;
}

namespace {

// The pass order: priority descending, then submit_seq, then job id.
bool Before(const JobDemand& a, const JobDemand& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.submit_seq != b.submit_seq) return a.submit_seq < b.submit_seq;
  return a.job_id < b.job_id;
}

}  // namespace

bool Scheduler::State::TryPack(const JobDemand& job, const Shape& sh, int layout,
                               const Reservation& head, ScheduleResult* out) {
  for (int kind : {kGpu, kCpu}) {
    taken.clear();
    if (Pack(sh, kind, PeekHandle(), &ranks, &taken)) {
      Commit(job.job_id, ranks);
      out->placed.push_back({job.job_id, ranks, head.active, layout});
      return true;
    }
  }
  return false;
}

void Scheduler::State::Decide(const JobDemand& job, Reservation* head,
                              std::unordered_map<std::string, FailInfo>* failed,
                              ScheduleResult* out) {
  if (job_handle.count(job.job_id) > 0) return;
  Shape& sh = shape;
  // An elastic job's larger layouts, on free slots only (a shape that failed in this pass
  // fails again: free slots only shrink).
  const int last = static_cast<int>(job.alternatives.size());
  for (int k = 0; k < last; ++k) {
    const JobDemand& layout = k == 0 ? job : job.alternatives[k - 1];
    if (!BuildShape(layout, &sh).ok() || failed->count(sh.key) > 0) continue;
    if (TryPack(job, sh, k, *head, out)) {
      failed->clear();  // as below
      return;
    }
  }
  // The job's own demand, or an elastic job's smallest layout: placed, or it waits as this.
  const JobDemand& demand = last == 0 ? job : job.alternatives.back();
  if (absl::Status s = BuildShape(demand, &sh); !s.ok()) {
    out->waiting[job.job_id] = absl::StrCat("invalid demand: ", s.message());
    return;
  }
  auto it = failed->find(sh.key);
  if (it == failed->end()) {
    if (TryPack(job, sh, last, *head, out)) {
      // A shape that failed before still fails, but whether it would fit with the head's
      // reservation lifted may have changed: reasons are worked out afresh.
      failed->clear();
      return;
    }
    FailInfo info = Classify(demand, sh, head);
    if (info.why == Why::kHead) {
      out->waiting[job.job_id] = std::move(info.text);
      failed->clear();  // what failed before the reservation is classified again after it
      return;
    }
    it = failed->emplace(sh.key, std::move(info)).first;
  }
  out->waiting[job.job_id] = Reason(demand, sh, it->second, *head);
}

void Scheduler::State::EndPass(const JobDemand* last, Reservation* head,
                               const ScheduleResult& out) {
  settled = out.placed.empty();
  settled_version = version;
  if (last != nullptr) tail = *last;
  head_res = Reservation();
  if (head->active) {
    this->head = *head->job;
    head_res = *head;
    head_res.job = nullptr;
  }
  EndReservation(head);
}

ScheduleResult Scheduler::Schedule(const std::vector<JobDemand>& queue) {
  State& st = *s_;
  ScheduleResult out;
  std::vector<const JobDemand*> order;
  order.reserve(queue.size());
  for (const JobDemand& j : queue) order.push_back(&j);
  std::sort(order.begin(), order.end(),
            [](const JobDemand* a, const JobDemand* b) { return Before(*a, *b); });
  Reservation head;
  // Shapes that failed in this pass, with why. Free slots only shrink during a pass (and after
  // the head's reservation is made they shrink further), so a shape that failed fails again;
  // its reason holds until the next placement or reservation.
  std::unordered_map<std::string, FailInfo> failed;
  for (const JobDemand* job : order) st.Decide(*job, &head, &failed, &out);
  st.head.reset();
  st.tail.reset();
  st.EndPass(order.empty() ? nullptr : order.back(), &head, out);
  return out;
}

std::optional<ScheduleResult> Scheduler::ScheduleAppended(const std::vector<JobDemand>& appended) {
  State& st = *s_;
  if (!st.settled || st.settled_version != st.version) return std::nullopt;
  std::vector<const JobDemand*> order;
  for (const JobDemand& j : appended) order.push_back(&j);
  std::sort(order.begin(), order.end(),
            [](const JobDemand* a, const JobDemand* b) { return Before(*a, *b); });
  if (order.empty()) return ScheduleResult{};
  if (st.tail.has_value() && !Before(*st.tail, *order.front())) return std::nullopt;
  // The state a full pass would be in after its last job: the same head, reserving the same
  // slots (nothing changed since it was chosen, so they are chosen again without a search of
  // every node: at 10,000 full nodes that search took ~4 ms per submit).
  Reservation head;
  std::optional<JobDemand> head_job = st.head;
  if (head_job.has_value()) {
    // A slot no longer free cannot happen while settled; be safe: a full pass.
    if (!st.Reapply(st.head_res, &head)) return std::nullopt;
    head.job = &*head_job;
  }
  ScheduleResult out;
  std::unordered_map<std::string, FailInfo> failed;
  for (const JobDemand* job : order) st.Decide(*job, &head, &failed, &out);
  st.head.reset();
  st.EndPass(order.back(), &head, out);
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

int64_t Scheduler::reservation_searches() const { return s_->reservation_searches; }

std::vector<SlotRef> Scheduler::AllocationOf(const std::string& job_id) const {
  auto it = s_->job_handle.find(job_id);
  if (it == s_->job_handle.end()) return {};
  return s_->handle_ranks[it->second];
}

}  // namespace dhp::controller
