// NodeTracker: worker registration, heartbeats and loss detection, persisted in the Store.
//
// A node that has not heartbeated for `heartbeat_timeout_ms` is marked LOST (with an event);
// its next heartbeat or registration brings it back to READY. After a controller restart every
// node gets a fresh grace period (its agent cannot have heartbeated while we were down).
//
// Thread-safety: not thread-safe; the Controller calls it only on its loop thread.
#ifndef DHP_CONTROLLER_NODE_TRACKER_H_
#define DHP_CONTROLLER_NODE_TRACKER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/check.h"
#include "common/clock.h"
#include "controller/store.h"
#include "dhp/v1/service.pb.h"

namespace dhp::controller {

struct NodeTrackerOptions {
  int heartbeat_interval_ms = 2000;   // told to agents at registration
  int heartbeat_timeout_ms = 10000;   // silence after which a node is LOST
  // After a controller restart, a node not heard from since gets at least this long before it
  // is LOST: agents reconnect with backoff, and losing a node fails the runs on it.
  int restart_grace_ms = 30000;
};

class NodeTracker {
 public:
  NodeTracker(Store& store, const Clock& clock, NodeTrackerOptions options);

  absl::Status Register(const v1::RegisterNodeRequest& req, v1::RegisterNodeResponse* resp,
                        std::vector<v1::Event>* events);
  absl::Status Heartbeat(const v1::HeartbeatRequest& req, std::vector<v1::Event>* events);
  std::vector<v1::Node> List();
  // Marks READY nodes that have been silent too long as LOST. Call periodically.
  absl::Status CheckHeartbeats(std::vector<v1::Event>* events);

 private:
  ThreadChecker loop_;  // the controller's loop thread: every entry point checks it
  absl::Status SetState(v1::Node* node, v1::NodeState state, const std::string& reason,
                        std::vector<v1::Event>* events);

  Store& store_;
  const Clock& clock_;
  const NodeTrackerOptions options_;
  const int64_t started_micros_;
  // Newest heartbeat per node, in memory; the store is updated on state changes and every
  // few heartbeats, so that a busy cluster does not write SQLite on every beat.
  std::map<std::string, int64_t> last_beat_;
  std::map<std::string, int64_t> last_persisted_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_NODE_TRACKER_H_
