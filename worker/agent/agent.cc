#include "worker/agent/agent.h"

#include <algorithm>

#include "common/logging.h"

namespace dhp::worker {

Agent::Agent(api::DhpClient& client, AgentOptions options)
    : client_(client), options_(std::move(options)) {}

void Agent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

bool Agent::SleepFor(int ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopped_; });
  return !stopped_;
}

bool Agent::Register(int* heartbeat_ms) {
  v1::RegisterNodeRequest req;
  *req.mutable_node() = options_.node;
  absl::StatusOr<v1::RegisterNodeResponse> resp = client_.RegisterNode(req);
  if (!resp.ok()) {
    DHP_LOG(WARNING) << "register with " << client_.target() << " failed: " << resp.status();
    return false;
  }
  *heartbeat_ms = std::max(100, resp->heartbeat_interval_ms());
  DHP_LOG(INFO) << "registered as node " << resp->node_id() << " with " << client_.target()
                << " (" << options_.node.resources().gpus_size() << " GPUs, "
                << options_.node.resources().cpu_slots() << " CPU slots); heartbeat every "
                << *heartbeat_ms << " ms";
  registered_ = true;
  return true;
}

int Agent::Run() {
  int registrations = 0;
  int backoff = options_.retry_initial_ms;
  int heartbeat_ms = 0;
  bool need_register = true;
  while (true) {
    if (need_register) {
      if (!Register(&heartbeat_ms)) {
        if (!SleepFor(backoff)) break;
        backoff = std::min(backoff * 2, options_.retry_max_ms);
        continue;
      }
      ++registrations;
      need_register = false;
      backoff = options_.retry_initial_ms;
    }
    if (!SleepFor(heartbeat_ms)) break;
    v1::HeartbeatRequest hb;
    hb.set_node_id(options_.node.id());
    absl::StatusOr<v1::HeartbeatResponse> resp = client_.Heartbeat(hb);
    if (resp.ok()) continue;
    if (resp.status().code() == absl::StatusCode::kNotFound) {
      DHP_LOG(WARNING) << "controller forgot this node; registering again";
      registered_ = false;
      need_register = true;
    } else {
      DHP_LOG(WARNING) << "heartbeat failed: " << resp.status();
    }
  }
  return registrations;
}

}  // namespace dhp::worker
