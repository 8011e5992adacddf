// NodeTracker: worker registration, heartbeats and loss detection, persisted in the Store.
//
// Nodes live in memory (loaded from the Store on first use): a heartbeat and the loss check
// read no SQLite. A state change is written at once, with its event; heartbeat times are
// written at most every 30 s per node, in one transaction per PersistDueBeats (the
// controller's persist tick, every 25 ms) or CheckHeartbeats for the nodes that are due.
//
// A node that has not heartbeated for `heartbeat_timeout_ms` is marked LOST (with an event);
// its next heartbeat or registration brings it back to READY. A cordon (SetCordon) is the
// operator's and outlives re-registration and restarts; agents cannot set or clear it. After a
// controller restart every
// node gets a fresh grace period (its agent cannot have heartbeated while we were down).
//
// A heartbeat with `stopping` (the agent is shutting down) marks the node stopping, once, with
// a "node.stopping" event: like a cordon, no new ranks go there, but it is the agent's, kept
// apart from the operator's cordon, and cleared when an agent registers the node again.
//
// Thread-safety: not thread-safe; the Controller calls it only on its loop thread.
#ifndef DHP_CONTROLLER_NODE_TRACKER_H_
#define DHP_CONTROLLER_NODE_TRACKER_H_

#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "common/check.h"
#include "common/clock.h"
#include "controller/store.h"
#include "dhp/v1/service.pb.h"

namespace dhp::controller {

// The most one node may offer (RegisterNode refuses more): beyond any machine, and the scheduler
// keeps state per slot.
inline constexpr int kMaxNodeGpus = 256;
inline constexpr int kMaxNodeCpuSlots = 1024;

struct NodeTrackerOptions {
  int heartbeat_interval_ms = 2000;   // told to agents at registration
  int heartbeat_timeout_ms = 10000;   // silence after which a node is LOST
  // After a controller restart, a node not heard from since gets at least this long before it
  // is LOST: agents reconnect with backoff, and losing a node fails the runs on it.
  int restart_grace_ms = 30000;
  // At most this many nodes' heartbeat times per PersistDueBeats / CheckHeartbeats write; the
  // rest stay due for the next (a burst of due beats, as after many nodes registered at once,
  // then spreads over several short writes instead of holding the loop for one long one).
  int beat_save_batch = 125;  // 5,000 a second at the controller's 25 ms persist tick
};

class NodeTracker {
 public:
  NodeTracker(Store& store, const Clock& clock, NodeTrackerOptions options);

  absl::Status Register(const v1::RegisterNodeRequest& req, v1::RegisterNodeResponse* resp,
                        std::vector<v1::Event>* events);
  absl::Status Heartbeat(const v1::HeartbeatRequest& req, std::vector<v1::Event>* events);
  // Cordons (`cordoned`, with the reason) or uncordons a node, persisted with a "node.cordon"
  // or "node.uncordon" event (none when nothing changes). NOT_FOUND when it never registered;
  // INVALID_ARGUMENT for an empty id or a reason over 1024 bytes or not UTF-8.
  absl::StatusOr<v1::Node> SetCordon(const std::string& node_id, bool cordoned,
                                     const std::string& reason, std::vector<v1::Event>* events);
  // Reads the stored nodes, once (every other entry point does so first). The controller calls
  // it before its runs are recovered, so that they see the nodes as the tracker does.
  void Load();
  std::vector<v1::Node> List();  // by id, with their newest heartbeat times
  // A page of List: the nodes with an id after `after_id` ("" from the first), at most `limit`.
  std::vector<v1::Node> List(const std::string& after_id, size_t limit);
  // A node as the tracker knows it; NOT_FOUND when it never registered.
  absl::StatusOr<v1::Node> Get(const std::string& node_id);
  // Writes heartbeat times that are due (as PersistDueBeats), then marks READY nodes that have been silent too
  // long as LOST. Call periodically.
  absl::Status CheckHeartbeats(std::vector<v1::Event>* events);
  // Writes the heartbeat times that are due, at most beat_save_batch, in one transaction. The
  // controller calls it every persist_ms, so that each write is small.
  absl::Status PersistDueBeats();
  // Writes every heartbeat time not yet written (on shutdown).
  absl::Status Flush();

 private:
  ThreadChecker loop_;  // the controller's loop thread: every entry point checks it
  struct Tracked {
    v1::Node node;             // as stored, but for last_heartbeat_time
    int64_t last_beat = 0;     // newest heartbeat (the stored one until it beats)
    int64_t persisted = 0;     // the heartbeat time the store holds
    bool heard = false;        // it has beaten or registered since this tracker started
  };
  void EnsureLoaded();
  // A stored node whose resources are over the limits Register checks (stored by an older
  // controller): its GPUs and CPU slots are dropped and it is cordoned with `why`, stored with
  // a "node.cordon" event, so that nothing is placed there until its agent registers again.
  void RefuseStoredResources(v1::Node& node, const absl::Status& why);
  // Moves `node` to `state`, with a "node.state" event in `new_events` when it changes.
  void MoveState(v1::Node& node, v1::NodeState state, const std::string& reason,
                 std::vector<v1::Event>* new_events) const;
  // Persists `t` in `state` (with an event when the state changes) at its newest beat time.
  absl::Status SetState(Tracked& t, v1::NodeState state, const std::string& reason,
                        std::vector<v1::Event>* events);
  // The agent said it is stopping: stores the node READY and stopping, with its events.
  absl::Status MarkStopping(Tracked& t, std::vector<v1::Event>* events);
  // Stores `node` (at `t`'s newest beat time) with `new_events`; then `t` holds it.
  absl::Status Persist(Tracked& t, v1::Node node, const std::vector<v1::Event>& new_events,
                       std::vector<v1::Event>* events);
  absl::Status FlushDue(bool all);
  // The node `id`, or null: by hash, not the map's ~14 string comparisons at 10,000 nodes.
  Tracked* Find(std::string_view id);
  // The node `id`, added (empty) if new.
  Tracked& FindOrAdd(const std::string& id);

  Store& store_;
  const Clock& clock_;
  const NodeTrackerOptions options_;
  const int64_t started_micros_;
  bool loaded_ = false;
  std::map<std::string, Tracked> nodes_;  // by id, in order: List pages, the loss check's order
  std::unordered_map<std::string_view, Tracked*> by_hash_;  // nodes_ by id (its keys, its values)
  std::deque<std::string> due_;            // nodes whose heartbeat time is to be written
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_NODE_TRACKER_H_
