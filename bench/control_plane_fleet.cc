// AgentFleet (control_plane_fleet.h): the shards, their connections and in-process relays, and
// the sums of their counters. A shard's own work is in control_plane_shard{,_traffic}.cc.
#include "bench/control_plane_fleet.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/client.h"
#include "bench/control_plane_shard.h"
#include "grpcpp/grpcpp.h"
#include "worker/relay/heartbeat_batcher.h"

namespace dhp::bench {

AgentFleet::AgentFleet(FleetOptions options) : options_(std::move(options)) {
  const int threads = std::max(1, options_.threads);
  for (int s = 0; s < threads; ++s) {
    shards_.push_back(std::make_unique<Shard>(options_, s, recording_));
  }
  for (int n = 0; n < options_.nodes; ++n) {
    char id[64];
    std::snprintf(id, sizeof id, "%s%05d", options_.node_prefix.c_str(), n);
    shards_[n % threads]->AddAgent(id);
  }
}

AgentFleet::~AgentFleet() { Stop(); }

void AgentFleet::Start() {
  if (started_) return;
  started_ = true;
  const int shards = static_cast<int>(shards_.size());
  const bool relayed = !options_.heartbeat_targets.empty() || options_.in_process_relays > 0;
  const int to_controller =
      relayed && options_.controller_channels > 0 ? options_.controller_channels : options_.channels;
  auto connect = [&](const std::string& target) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own HTTP/2 connection
    args.SetMaxReceiveMessageSize(64 << 20);
    for (const auto& [name, value] : options_.channel_args) args.SetInt(name, value);
    auto ch = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ch;
  };
  std::vector<worker::HeartbeatBatcher*> relays;
  worker::HeartbeatBatcherOptions batching;
  batching.window_ms = options_.relay_window_ms;
  for (int i = 0; i < options_.in_process_relays; ++i) {
    // As dhp-relay: its own connection, and a HeartbeatBatch deadline of 4 s.
    relay_clients_.push_back(std::make_unique<api::DhpClient>(options_.target, 4000));
    relays_.push_back(std::make_unique<worker::HeartbeatBatcher>(*relay_clients_.back(), batching));
    relays.push_back(relays_.back().get());
  }
  int relay_next = 0;
  for (auto& shard : shards_) {
    std::vector<std::shared_ptr<grpc::Channel>> channels, heartbeats;
    for (int i = 0; i < std::max(1, to_controller / shards); ++i) {
      channels.push_back(connect(options_.target));
    }
    const int to_relays =
        options_.heartbeat_targets.empty() ? 0 : std::max(1, options_.channels / shards);
    for (int i = 0; i < to_relays; ++i) {
      const std::string& relay = options_.heartbeat_targets[relay_next++ %
                                                            options_.heartbeat_targets.size()];
      heartbeats.push_back(connect(relay));
    }
    shard->Start(std::move(channels), std::move(heartbeats), relays);
  }
}

void AgentFleet::Stop() {
  for (auto& shard : shards_) {
    if (shard != nullptr) shard->RequestStop();
  }
  for (auto& shard : shards_) {
    if (shard != nullptr && !shard->Join()) {
      (void)shard.release();  // its completion queue still holds calls: never destroy it
    }
  }
  relays_.clear();  // sends what they hold; the shards drop the answers
  relay_clients_.clear();
}

int64_t AgentFleet::Registered() const {
  int64_t n = 0;
  for (const auto& shard : shards_) n += shard != nullptr ? shard->registered() : 0;
  return n;
}

FleetCounters AgentFleet::Counters() const {
  FleetCounters c;
  for (const auto& shard : shards_) {
    if (shard != nullptr) shard->AddCounters(&c);
  }
  return c;
}

void AgentFleet::SetRecording(bool on) { recording_ = on; }

FleetSamples AgentFleet::TakeSamples() {
  FleetSamples out;
  for (auto& shard : shards_) {
    if (shard != nullptr) shard->TakeSamples(&out);
  }
  return out;
}

}  // namespace dhp::bench
