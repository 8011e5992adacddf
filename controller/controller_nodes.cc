// The Controller's node methods: registration, heartbeats, listing, drain and uncordon, and
// how node state changes reach the Supervisor (controller.h).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "api/heartbeat_limits.h"
#include "common/utf8.h"
#include "controller/controller.h"

namespace dhp::controller {
namespace {

// "node n1 was drained (kernel upgrade)": what the runs' events and end reasons say.
std::string DrainWhy(const v1::Node& node) {
  return absl::StrCat("node ", node.id(), " was drained",
                      node.cordon_reason().empty() ? "" : " (" + node.cordon_reason() + ")");
}

// ListNodes' page size, default and most: a page is copied on the loop (~3 us a node).
constexpr int kMaxNodePage = 1000;

// A page token names the last node of its page: "n" and the id's bytes in hex (ids may hold
// any UTF-8, and a token travels in URLs). Listing resumes after that id even if the node has
// gone since.
std::string EncodeNodePageToken(const std::string& last_id) {
  return "n" + absl::BytesToHexString(last_id);
}

// The id to list after ("" for the first page), or INVALID_ARGUMENT.
absl::StatusOr<std::string> DecodeNodePageToken(const std::string& token) {
  if (token.empty()) return std::string();
  const std::string hex = token.substr(1);
  const bool ok = token[0] == 'n' && !hex.empty() && hex.size() % 2 == 0 &&
                  std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); });
  if (!ok) {
    return absl::InvalidArgumentError("page_token: \"" + EscapeInvalidUtf8(token.substr(0, 64)) +
                                      "\" is not a token returned by ListNodes");
  }
  return absl::HexStringToBytes(hex);
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

absl::Status Controller::ListNodes(const v1::ListNodesRequest& req, v1::ListNodesResponse* resp) {
  if (req.page_size() < 0 || req.page_size() > kMaxNodePage) {
    return absl::InvalidArgumentError(absl::StrCat("page_size: ", req.page_size(),
                                                   " must be in 0..", kMaxNodePage,
                                                   " (0: default ", kMaxNodePage, ")"));
  }
  absl::StatusOr<std::string> after = DecodeNodePageToken(req.page_token());
  if (!after.ok()) return after.status();
  const size_t limit = req.page_size() == 0 ? kMaxNodePage : req.page_size();
  return OnLoop([&] {
    // One more than the page, to know whether another follows.
    std::vector<v1::Node> nodes = nodes_.List(*after, limit + 1);
    if (nodes.size() > limit) {
      nodes.pop_back();
      resp->set_next_page_token(EncodeNodePageToken(nodes.back().id()));
    }
    for (v1::Node& n : nodes) *resp->add_nodes() = std::move(n);
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
  if (absl::Status s = api::CheckHeartbeatLimits(req); !s.ok()) return s;
  return OnLoop([&] {
    std::vector<v1::Event> events;
    absl::Status s = nodes_.Heartbeat(req, &events);
    if (s.ok()) s = ApplyNodeEvents(events, &events);
    // The ranks' reports before their exits: a rank's last step counts before it has ended.
    if (s.ok()) RelayProgress(req, resp, &events);
    if (s.ok()) s = supervisor_.OnHeartbeat(req, resp, &events);
    Settle(events);
    return s;
  });
}

absl::Status Controller::HeartbeatBatch(const v1::HeartbeatBatchRequest& req,
                                        v1::HeartbeatBatchResponse* resp) {
  if (absl::Status s = api::CheckBatchLimits(req); !s.ok()) return s;
  return OnLoop([&] {
    resp->mutable_answers()->Reserve(req.heartbeats_size());
    for (const v1::RelayedHeartbeat& entry : req.heartbeats()) {
      v1::HeartbeatAnswer* answer = resp->add_answers();
      absl::Status s = Heartbeat(entry.heartbeat(), answer->mutable_response());
      if (s.ok()) continue;
      answer->Clear();
      answer->set_code(static_cast<int>(s.code()));
      answer->set_message(std::string(s.message()));
    }
    return absl::OkStatus();
  });
}

void Controller::RelayProgress(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp,
                               std::vector<v1::Event>* events) {
  for (const v1::ReportProgressRequest& report : req.progress()) {
    v1::ProgressAnswer* answer = resp->add_progress();
    absl::Status s =
        supervisor_.OnRelayedProgress(req.node_id(), report, answer->mutable_response(), events);
    if (s.ok()) continue;
    answer->Clear();
    answer->set_code(static_cast<int>(s.code()));
    answer->set_message(std::string(s.message()));
  }
  relayed_progress_.Increment(req.progress_size());
}

}  // namespace dhp::controller
