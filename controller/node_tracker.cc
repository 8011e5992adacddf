#include "controller/node_tracker.h"

#include <algorithm>

#include "common/proto_enum.h"
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

absl::Status NodeTracker::SetState(v1::Node* node, v1::NodeState state,
                                   const std::string& reason, std::vector<v1::Event>* events) {
  std::vector<v1::Event> new_events;
  if (node->state() != state) {
    v1::Event e;
    e.set_node_id(node->id());
    *e.mutable_time() = MicrosToTimestamp(clock_.NowMicros());
    e.set_type("node.state");
    e.set_from_state(node->state() == v1::NODE_STATE_UNSPECIFIED ? "" : ShortName(node->state()));
    e.set_to_state(ShortName(state));
    e.set_reason(reason);
    new_events.push_back(e);
  }
  node->set_state(state);
  absl::StatusOr<std::vector<v1::Event>> added = store_.PutNode(*node, new_events);
  if (!added.ok()) return added.status();
  last_persisted_[node->id()] = TimestampToMicros(node->last_heartbeat_time());
  events->insert(events->end(), added->begin(), added->end());
  return absl::OkStatus();
}

absl::Status NodeTracker::Register(const v1::RegisterNodeRequest& req,
                                   v1::RegisterNodeResponse* resp,
                                   std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  v1::Node node = req.node();
  if (node.id().empty()) node.set_id(node.hostname());
  if (absl::Status s = CheckNodeId(node.id()); !s.ok()) return s;
  const v1::NodeResources& r = node.resources();
  if (r.gpus_size() == 0 && r.cpu_slots() <= 0) {
    return absl::InvalidArgumentError("node.resources: node " + node.id() +
                                      " offers no GPUs and no CPU slots");
  }
  const int64_t now = clock_.NowMicros();
  std::string reason = "registered";
  absl::StatusOr<v1::Node> existing = store_.GetNode(node.id());
  if (existing.ok()) {
    *node.mutable_register_time() = existing->register_time();
    node.set_state(existing->state());
    reason = "re-registered";
  } else {
    *node.mutable_register_time() = MicrosToTimestamp(now);
    node.set_state(v1::NODE_STATE_UNSPECIFIED);
  }
  *node.mutable_last_heartbeat_time() = MicrosToTimestamp(now);
  last_beat_[node.id()] = now;
  if (node.state() == v1::NODE_STATE_READY) node.set_state(v1::NODE_STATE_UNSPECIFIED);
  if (absl::Status s = SetState(&node, v1::NODE_STATE_READY, reason, events); !s.ok()) return s;
  resp->set_node_id(node.id());
  resp->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  return absl::OkStatus();
}

absl::Status NodeTracker::Heartbeat(const v1::HeartbeatRequest& req,
                                    std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  absl::StatusOr<v1::Node> node = store_.GetNode(req.node_id());
  if (!node.ok()) {
    return absl::NotFoundError("node " + req.node_id() + " is not registered; register first");
  }
  const int64_t now = clock_.NowMicros();
  last_beat_[node->id()] = now;
  *node->mutable_last_heartbeat_time() = MicrosToTimestamp(now);
  if (node->state() != v1::NODE_STATE_READY) {
    return SetState(&*node, v1::NODE_STATE_READY, "heartbeat resumed", events);
  }
  if (now - last_persisted_[node->id()] >= kPersistEveryMicros) {
    return SetState(&*node, v1::NODE_STATE_READY, "", events);
  }
  return absl::OkStatus();
}

std::vector<v1::Node> NodeTracker::List() {
  DHP_CHECK_ON_THREAD(loop_);
  std::vector<v1::Node> nodes = store_.ListNodes();
  for (v1::Node& n : nodes) {
    auto it = last_beat_.find(n.id());
    if (it != last_beat_.end()) *n.mutable_last_heartbeat_time() = MicrosToTimestamp(it->second);
  }
  return nodes;
}

absl::Status NodeTracker::CheckHeartbeats(std::vector<v1::Event>* events) {
  DHP_CHECK_ON_THREAD(loop_);
  const int64_t now = clock_.NowMicros();
  const int64_t timeout = static_cast<int64_t>(options_.heartbeat_timeout_ms) * 1000;
  for (v1::Node& node : store_.ListNodes()) {
    if (node.state() != v1::NODE_STATE_READY) continue;
    int64_t last = TimestampToMicros(node.last_heartbeat_time());
    auto it = last_beat_.find(node.id());
    const bool heard = it != last_beat_.end();  // since this controller started
    if (heard) last = std::max(last, it->second);
    // Grace after a controller restart: a node not heard from since counts its silence from our
    // start, and gets at least restart_grace_ms. `last` itself stays the real last beat, for
    // the stored time and the reason.
    const int64_t grace = std::max<int64_t>(timeout, int64_t{options_.restart_grace_ms} * 1000);
    if (!heard && now - started_micros_ < grace) continue;
    if (now - std::max(last, started_micros_) < timeout) continue;
    *node.mutable_last_heartbeat_time() = MicrosToTimestamp(last);
    const std::string reason = "no heartbeat for " + FormatSeconds(now - last) + " (timeout " +
                               FormatSeconds(timeout) + ")";
    if (absl::Status s = SetState(&node, v1::NODE_STATE_LOST, reason, events); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace dhp::controller
