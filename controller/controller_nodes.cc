// The Controller's node methods: registration, heartbeats, listing, drain and uncordon, and
// how node state changes reach the Supervisor (controller.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/controller.h"

namespace dhp::controller {
namespace {

// "node n1 was drained (kernel upgrade)": what the runs' events and end reasons say.
std::string DrainWhy(const v1::Node& node) {
  return absl::StrCat("node ", node.id(), " was drained",
                      node.cordon_reason().empty() ? "" : " (" + node.cordon_reason() + ")");
}

}  // namespace

absl::Status Controller::PreemptOnCordonedNodes() {
  std::vector<v1::Event> events;
  absl::Status s;
  for (const v1::Node& node : nodes_.List()) {
    if (!node.cordoned()) continue;
    std::vector<std::string> job_ids;
    s.Update(supervisor_.PreemptRunsOn(node.id(), DrainWhy(node), &job_ids, &events));
  }
  Settle(events);
  return s;
}

absl::Status Controller::ApplyNodeEvents(const std::vector<v1::Event>& events,
                                         std::vector<v1::Event>* more) {
  std::vector<v1::Event> changes;
  for (const v1::Event& e : events) {
    // A stopping agent (a heartbeat's `stopping`) takes the node out of scheduling.
    if (e.type() == "node.state" || e.type() == "node.stopping") changes.push_back(e);
  }
  for (const v1::Event& e : changes) {
    if (e.to_state() == "LOST") {
      if (absl::Status s = supervisor_.OnNodeLost(e.node_id(), more); !s.ok()) return s;
    } else if (absl::StatusOr<v1::Node> node = nodes_.Get(e.node_id()); node.ok()) {
      supervisor_.OnNodeChanged(*node);
    }
  }
  return absl::OkStatus();
}

// ---- nodes ---------------------------------------------------------------------------------

absl::Status Controller::ListNodes(const v1::ListNodesRequest&, v1::ListNodesResponse* resp) {
  return OnLoop([&] {
    for (v1::Node& n : nodes_.List()) *resp->add_nodes() = std::move(n);
    return absl::OkStatus();
  });
}

absl::Status Controller::DrainNode(const v1::DrainNodeRequest& req, v1::DrainNodeResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::StatusOr<v1::Node> node = nodes_.SetCordon(req.node_id(), true, req.reason(), &events);
    absl::Status s = node.status();
    if (s.ok()) {
      supervisor_.OnNodeChanged(*node);
      std::vector<std::string> job_ids;
      s = supervisor_.PreemptRunsOn(node->id(), DrainWhy(*node), &job_ids, &events);
      *resp->mutable_node() = *node;
      for (std::string& id : job_ids) resp->add_job_ids(std::move(id));
    }
    Settle(events);
    return s;
  });
}

absl::Status Controller::UncordonNode(const v1::UncordonNodeRequest& req,
                                      v1::UncordonNodeResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::StatusOr<v1::Node> node = nodes_.SetCordon(req.node_id(), false, "", &events);
    if (node.ok()) {
      supervisor_.OnNodeChanged(*node);  // schedulable again: the next pass may place there
      *resp->mutable_node() = *node;
    }
    Settle(events);
    return node.status();
  });
}

absl::Status Controller::RegisterNode(const v1::RegisterNodeRequest& req,
                                      v1::RegisterNodeResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = nodes_.Register(req, resp, &events);
    if (s.ok()) {
      if (absl::StatusOr<v1::Node> node = nodes_.Get(resp->node_id()); node.ok()) {
        supervisor_.OnNodeChanged(*node);
      }
    }
    Settle(events);
    return s;
  });
}

absl::Status Controller::Heartbeat(const v1::HeartbeatRequest& req,
                                   v1::HeartbeatResponse* resp) {
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = nodes_.Heartbeat(req, &events);
    if (s.ok()) s = ApplyNodeEvents(events, &events);
    if (s.ok()) s = supervisor_.OnHeartbeat(req, resp, &events);
    Settle(events);
    return s;
  });
}

}  // namespace dhp::controller
