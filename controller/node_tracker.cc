#include "controller/node_tracker.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/proto_enum.h"
#include "common/utf8.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

// Persist a node's heartbeat time at most this often (it is also persisted on every change).
constexpr int64_t kPersistEveryMicros = 30 * 1000000LL;

absl::Status CheckNodeId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("node.id: must not be empty");
  if (id.size() > 253) return absl::InvalidArgumentError("node.id: longer than 253 characters");
  for (char c : id) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
    if (!ok) {
      return absl::InvalidArgumentError("node.id: \"" + id +
                                        "\" may contain only letters, digits, '-', '.' and '_'");
    }
  }
  return absl::OkStatus();
}

// What a node offers, within what one machine has: the scheduler keeps state per slot, so an
// agent's (or a typo's) cpu_slots of 2^31 would take the controller's memory.
// Checked again when the tracker loads: a node stored by a controller that did not check
// (before these limits) has its resources refused then (NodeTracker::RefuseStoredResources).
absl::Status CheckResourceLimits(const std::string& id, const v1::NodeResources& r) {
  auto invalid = [&](const std::string& what) {
    return absl::InvalidArgumentError("node.resources." + what + " (node " + id + ")");
  };
  if (r.gpus_size() > kMaxNodeGpus) {
    return invalid("gpus: " + std::to_string(r.gpus_size()) + " GPUs; a node has at most " +
                   std::to_string(kMaxNodeGpus));
  }
  if (r.cpu_slots() < 0 || r.cpu_slots() > kMaxNodeCpuSlots) {
    return invalid("cpu_slots: " + std::to_string(r.cpu_slots()) + " is not in 0.." +
                   std::to_string(kMaxNodeCpuSlots));
  }
  if (r.memory_bytes() < 0) {
    return invalid("memory_bytes: " + std::to_string(r.memory_bytes()) + " is negative");
  }
  std::vector<bool> seen(kMaxNodeGpus, false);
  for (int i = 0; i < r.gpus_size(); ++i) {
    const v1::Gpu& g = r.gpus(i);
    const std::string at = "gpus[" + std::to_string(i) + "].";
    if (g.index() < 0 || g.index() >= kMaxNodeGpus) {
      return invalid(at + "index: " + std::to_string(g.index()) + " is not in 0.." +
                     std::to_string(kMaxNodeGpus - 1));
    }
    if (seen[g.index()]) {
      return invalid(at + "index: " + std::to_string(g.index()) + " is listed twice");
    }
    seen[g.index()] = true;
    if (g.memory_bytes() < 0) {
      return invalid(at + "memory_bytes: " + std::to_string(g.memory_bytes()) + " is negative");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckResources(const std::string& id, const v1::NodeResources& r) {
  if (r.gpus_size() == 0 && r.cpu_slots() <= 0) {
    return absl::InvalidArgumentError("node.resources: node " + id +
                                      " offers no GPUs and no CPU slots");
  }
  return CheckResourceLimits(id, r);
}

// "70 s"; below 10 s with one decimal ("1.5 s"), so that short timeouts do not read "0 s".
std::string FormatSeconds(int64_t micros) {
  if (micros >= 10 * 1000000LL || micros % 1000000 == 0) {
    return std::to_string(micros / 1000000) + " s";
  }
  const int64_t tenths = micros / 100000;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " s";
}

}  // namespace

NodeTracker::NodeTracker(Store& store, const Clock& clock, NodeTrackerOptions options)
    : store_(store), clock_(clock), options_(options), started_micros_(clock.NowMicros()) {}

void NodeTracker::Load() {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
}

void NodeTracker::EnsureLoaded() {
  if (loaded_) return;
  loaded_ = true;
  for (v1::Node& node : store_.ListNodes()) {
    if (absl::Status bad = CheckResourceLimits(node.id(), node.resources()); !bad.ok()) {
      RefuseStoredResources(node, bad);
    }
    Tracked& t = FindOrAdd(node.id());
    t.last_beat = t.persisted = TimestampToMicros(node.last_heartbeat_time());
    t.node = std::move(node);
  }
}

void NodeTracker::RefuseStoredResources(v1::Node& node, const absl::Status& why) {
  const std::string reason =
      absl::StrCat("stored resources refused: ", why.message(),
                   "; restart its agent to register what the node has, then uncordon it");
  DHP_LOG(WARNING) << "node " << node.id() << ": " << reason;
  node.mutable_resources()->clear_gpus();
  node.mutable_resources()->set_cpu_slots(0);
  node.mutable_resources()->set_memory_bytes(std::max<int64_t>(0, node.resources().memory_bytes()));
  node.set_cordoned(true);
  node.set_cordon_reason(reason);
  const int64_t now = clock_.NowMicros();
  *node.mutable_cordon_time() = MicrosToTimestamp(now);
  v1::Event e;
  e.set_node_id(node.id());
  *e.mutable_time() = MicrosToTimestamp(now);
  e.set_type("node.cordon");
  e.set_reason(reason);
  absl::StatusOr<std::vector<v1::Event>> added = store_.PutNode(node, {e});
  if (!added.ok()) DHP_LOG(ERROR) << "node " << node.id() << ": " << added.status();
}

void NodeTracker::MoveState(v1::Node& node, v1::NodeState state, const std::string& reason,
                            std::vector<v1::Event>* new_events) const {
  if (node.state() != state) {
    v1::Event e;
    e.set_node_id(node.id());
    *e.mutable_time() = MicrosToTimestamp(clock_.NowMicros());
    e.set_type("node.state");
    e.set_from_state(node.state() == v1::NODE_STATE_UNSPECIFIED ? "" : ShortName(node.state()));
    e.set_to_state(ShortName(state));
    e.set_reason(reason);
    new_events->push_back(e);
  }
  node.set_state(state);
}

absl::Status NodeTracker::SetState(Tracked& t, v1::NodeState state, const std::string& reason,
                                   std::vector<v1::Event>* events) {
  std::vector<v1::Event> new_events;
  v1::Node node = t.node;
  MoveState(node, state, reason, &new_events);
  return Persist(t, std::move(node), new_events, events);
}

absl::Status NodeTracker::Persist(Tracked& t, v1::Node node,
                                  const std::vector<v1::Event>& new_events,
                                  std::vector<v1::Event>* events) {
  *node.mutable_last_heartbeat_time() = MicrosToTimestamp(t.last_beat);
  absl::StatusOr<std::vector<v1::Event>> added = store_.PutNode(node, new_events);
  if (!added.ok()) return added.status();
  t.node = std::move(node);
  t.persisted = t.last_beat;
  events->insert(events->end(), added->begin(), added->end());
  return absl::OkStatus();
}

absl::Status NodeTracker::Register(const v1::RegisterNodeRequest& req,
                                   v1::RegisterNodeResponse* resp,
                                   std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
  v1::Node node = req.node();
  if (node.id().empty()) node.set_id(node.hostname());
  if (absl::Status s = CheckNodeId(node.id()); !s.ok()) return s;
  if (absl::Status s = CheckResources(node.id(), node.resources()); !s.ok()) return s;
  const int64_t now = clock_.NowMicros();
  std::string reason = "registered";
  Tracked* const existing = Find(node.id());
  node.clear_cordoned();  // the operator's, never the agent's
  node.clear_cordon_reason();
  node.clear_cordon_time();
  node.clear_stopping();  // a registering agent is a new process: it is not stopping
  node.clear_stopping_time();
  if (existing != nullptr) {
    const v1::Node& before = existing->node;
    *node.mutable_register_time() = before.register_time();
    node.set_state(before.state());
    node.set_cordoned(before.cordoned());
    node.set_cordon_reason(before.cordon_reason());
    if (before.has_cordon_time()) *node.mutable_cordon_time() = before.cordon_time();
    reason = before.stopping() ? "re-registered (a new agent: no longer stopping)"
                               : "re-registered";
  } else {
    *node.mutable_register_time() = MicrosToTimestamp(now);
    node.set_state(v1::NODE_STATE_UNSPECIFIED);
  }
  if (node.state() == v1::NODE_STATE_READY) node.set_state(v1::NODE_STATE_UNSPECIFIED);
  Tracked t = existing != nullptr ? *existing : Tracked{};
  t.node = node;
  t.last_beat = now;
  t.heard = true;
  if (absl::Status s = SetState(t, v1::NODE_STATE_READY, reason, events); !s.ok()) return s;
  FindOrAdd(node.id()) = std::move(t);  // only once stored: a refused write leaves no trace
  resp->set_node_id(node.id());
  resp->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  return absl::OkStatus();
}

absl::Status NodeTracker::Heartbeat(const v1::HeartbeatRequest& req,
                                    std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
  if (req.node_id().empty()) return absl::InvalidArgumentError("node_id: must not be empty");
  if (req.node_id().size() > 253) {  // no registered id is: not quoted back (a batch's answer)
    return absl::InvalidArgumentError("node_id: longer than 253 characters");
  }
  Tracked* const found = Find(req.node_id());
  if (found == nullptr) {
    return absl::NotFoundError("node " + req.node_id() + " is not registered; register first");
  }
  Tracked& t = *found;
  const int64_t now = clock_.NowMicros();
  t.last_beat = now;
  t.heard = true;
  if (req.stopping() && !t.node.stopping()) return MarkStopping(t, events);
  if (t.node.state() != v1::NODE_STATE_READY) {
    return SetState(t, v1::NODE_STATE_READY, "heartbeat resumed", events);
  }
  // Written by the next tick; `persisted` moves now so that the node is queued once.
  if (now - t.persisted >= kPersistEveryMicros) {
    t.persisted = now;
    due_.push_back(t.node.id());
  }
  return absl::OkStatus();
}

absl::Status NodeTracker::MarkStopping(Tracked& t, std::vector<v1::Event>* events) {
  const int64_t now = clock_.NowMicros();
  std::vector<v1::Event> new_events;
  v1::Node node = t.node;
  MoveState(node, v1::NODE_STATE_READY, "heartbeat resumed", &new_events);
  node.set_stopping(true);
  *node.mutable_stopping_time() = MicrosToTimestamp(now);
  v1::Event e;
  e.set_node_id(node.id());
  *e.mutable_time() = MicrosToTimestamp(now);
  e.set_type("node.stopping");
  e.set_reason("the agent is shutting down: its ranks checkpoint and exit; no new ranks are "
               "placed here until an agent registers the node again");
  new_events.push_back(e);
  return Persist(t, std::move(node), new_events, events);
}

absl::StatusOr<v1::Node> NodeTracker::SetCordon(const std::string& node_id, bool cordoned,
                                                 const std::string& reason,
                                                 std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
  if (node_id.empty()) return absl::InvalidArgumentError("node_id: must not be empty");
  if (reason.size() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("reason: ", reason.size(), " bytes, over the limit of 1024"));
  }
  if (const std::string bad = Utf8Error(reason); !bad.empty()) {
    return absl::InvalidArgumentError("reason: " + bad);
  }
  Tracked* const found = Find(node_id);
  if (found == nullptr) return absl::NotFoundError("node " + node_id + " not found");
  Tracked& t = *found;
  if (t.node.cordoned() == cordoned && (!cordoned || t.node.cordon_reason() == reason)) {
    return Get(node_id);
  }
  v1::Node node = t.node;
  const int64_t now = clock_.NowMicros();
  node.set_cordoned(cordoned);
  node.set_cordon_reason(cordoned ? reason : "");
  if (cordoned) {
    *node.mutable_cordon_time() = MicrosToTimestamp(now);
  } else {
    node.clear_cordon_time();
  }
  *node.mutable_last_heartbeat_time() = MicrosToTimestamp(t.last_beat);
  v1::Event e;
  e.set_node_id(node_id);
  *e.mutable_time() = MicrosToTimestamp(now);
  e.set_type(cordoned ? "node.cordon" : "node.uncordon");
  e.set_reason(cordoned ? (reason.empty() ? "drained" : "drained: " + reason)
                        : "uncordoned: ranks may be placed here again");
  absl::StatusOr<std::vector<v1::Event>> added = store_.PutNode(node, {e});
  if (!added.ok()) return added.status();
  t.node = std::move(node);
  t.persisted = t.last_beat;
  events->insert(events->end(), added->begin(), added->end());
  return Get(node_id);
}

std::vector<v1::Node> NodeTracker::List() { return List("", SIZE_MAX); }

std::vector<v1::Node> NodeTracker::List(const std::string& after_id, size_t limit) {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
  std::vector<v1::Node> nodes;
  nodes.reserve(std::min(limit, nodes_.size()));
  for (auto it = nodes_.upper_bound(after_id); it != nodes_.end() && nodes.size() < limit; ++it) {
    nodes.push_back(it->second.node);
    *nodes.back().mutable_last_heartbeat_time() = MicrosToTimestamp(it->second.last_beat);
  }
  return nodes;
}

absl::StatusOr<v1::Node> NodeTracker::Get(const std::string& node_id) {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
  const Tracked* const t = Find(node_id);
  if (t == nullptr) return absl::NotFoundError("node " + node_id + " not found");
  v1::Node node = t->node;
  *node.mutable_last_heartbeat_time() = MicrosToTimestamp(t->last_beat);
  return node;
}

absl::Status NodeTracker::FlushDue(bool all) {
  std::vector<v1::Node> batch;
  auto add = [&](Tracked& t) {
    batch.push_back(t.node);
    *batch.back().mutable_last_heartbeat_time() = MicrosToTimestamp(t.last_beat);
    t.persisted = t.last_beat;
  };
  if (all) {
    for (auto& [id, t] : nodes_) {
      if (t.persisted != t.last_beat) add(t);
    }
  } else {
    while (!due_.empty() && static_cast<int>(batch.size()) < options_.beat_save_batch) {
      if (Tracked* t = Find(due_.front()); t != nullptr) add(*t);
      due_.pop_front();
    }
  }
  if (all) due_.clear();
  absl::Status s = store_.PutNodes(batch);
  if (!s.ok()) return s;
  for (const v1::Node& n : batch) {
    *FindOrAdd(n.id()).node.mutable_last_heartbeat_time() = n.last_heartbeat_time();
  }
  return absl::OkStatus();
}

NodeTracker::Tracked* NodeTracker::Find(std::string_view id) {
  auto it = by_hash_.find(id);
  return it != by_hash_.end() ? it->second : nullptr;
}

NodeTracker::Tracked& NodeTracker::FindOrAdd(const std::string& id) {
  auto [it, added] = nodes_.try_emplace(id);
  if (added) by_hash_.emplace(it->first, &it->second);  // a map's keys and values never move
  return it->second;
}

absl::Status NodeTracker::Flush() {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
  return FlushDue(true);
}

absl::Status NodeTracker::PersistDueBeats() {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
  return FlushDue(false);
}

absl::Status NodeTracker::CheckHeartbeats(std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  EnsureLoaded();
  if (absl::Status s = FlushDue(false); !s.ok()) {
    DHP_LOG(WARNING) << "writing heartbeat times (kept in memory; written again with each node's next due beat): " << s;
  }
  const int64_t now = clock_.NowMicros();
  const int64_t timeout = static_cast<int64_t>(options_.heartbeat_timeout_ms) * 1000;
  // Grace after a controller restart: a node not heard from since counts its silence from our
  // start, and gets at least restart_grace_ms. `last_beat` itself stays the real last beat, for
  // the stored time and the reason.
  const int64_t grace = std::max<int64_t>(timeout, int64_t{options_.restart_grace_ms} * 1000);
  for (auto& [id, t] : nodes_) {
    if (t.node.state() != v1::NODE_STATE_READY) continue;
    if (!t.heard && now - started_micros_ < grace) continue;
    if (now - std::max(t.last_beat, started_micros_) < timeout) continue;
    const std::string reason = "no heartbeat for " + FormatSeconds(now - t.last_beat) +
                               " (timeout " + FormatSeconds(timeout) + ")";
    if (absl::Status s = SetState(t, v1::NODE_STATE_LOST, reason, events); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace dhp::controller
