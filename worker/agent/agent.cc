#include "worker/agent/agent.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "common/logging.h"

namespace dhp::worker {
namespace {

using SteadyClock = std::chrono::steady_clock;

int MillisUntil(SteadyClock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - SteadyClock::now());
  return static_cast<int>(std::max<int64_t>(0, ms.count()));
}

}  // namespace

AgentOptions Agent::WithDefaults(AgentOptions options) {
  if (options.ranks.node_id.empty()) options.ranks.node_id = options.node.id();
  return options;
}

Agent::Agent(api::DhpClient& client, AgentOptions options, api::DhpClient* heartbeat_relay)
    : client_(client),
      beats_(client),
      heartbeat_relay_(heartbeat_relay),
      options_(WithDefaults(std::move(options))),
      launcher_(options_.ranks),
      shipper_({options_.node.id()},
               [&client](const v1::AppendLogsRequest& req) { return client.AppendLogs(req); }) {}

void Agent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

bool Agent::Stopped() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

bool Agent::WaitFor(int ms) {
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
  shipper_.Resync();  // a restarted controller may have lost the logs it held
  return true;
}

Agent::Beat Agent::Heartbeat() {
  v1::HeartbeatRequest hb;
  hb.set_node_id(options_.node.id());
  hb.set_stopping(Stopped());  // from Stop on: the controller places nothing new here
  bool exits = false;
  for (v1::RankStatus& s : launcher_.Statuses()) {
    exits = exits || s.state() == v1::RANK_PROCESS_STATE_EXITED;
    *hb.add_ranks() = std::move(s);
  }
  // The controller may fail the run on this report: the ranks' last output goes first, so that
  // the run's logs are whole once it is FAILED (PollRanks has tracked the exited ranks' logs).
  if (exits) ShipLogs();
  // Taken after the statuses: a report a rank sent before it exited goes with its exit.
  relay_.TakeInto(&hb);
  absl::StatusOr<v1::HeartbeatResponse> resp = heartbeat_relay_ != nullptr ? RelayedBeat(hb)
                                                : options_.heartbeat_stream ? StreamBeat(hb)
                                                                            : client_.Heartbeat(hb);
  if (resp.ok()) {
    relay_.Answered(hb, *resp);
    RetainRelayed(hb, *resp);
    if (heartbeat_failures_ > 0) {
      DHP_LOG(INFO) << "heartbeat ok again after " << heartbeat_failures_ << " failures";
    }
    heartbeat_failures_ = 0;
    if (hb.stopping()) return Beat::kOk;  // Shutdown stops every rank; none may start
    launcher_.Reconcile({resp->ranks().begin(), resp->ranks().end()});
    shipper_.Track(launcher_.Logs());
    return Beat::kOk;
  }
  relay_.Failed(hb);
  if (resp.status().code() == absl::StatusCode::kNotFound) {
    DHP_LOG(WARNING) << "controller forgot this node; registering again";
    return Beat::kNotFound;
  }
  ++heartbeat_failures_;
  if ((heartbeat_failures_ & (heartbeat_failures_ - 1)) == 0) {  // 1st, 2nd, 4th, 8th, ...
    DHP_LOG(WARNING) << "heartbeat failed " << heartbeat_failures_ << " time(s) in a row ("
                     << launcher_.tracked() << " rank processes keep running): " << resp.status();
  }
  return Beat::kFailed;
}

absl::StatusOr<v1::HeartbeatResponse> Agent::RelayedBeat(const v1::HeartbeatRequest& hb) {
  if (relay_failing_ && SteadyClock::now() < relay_retry_at_) return client_.Heartbeat(hb);
  absl::StatusOr<v1::HeartbeatResponse> resp = heartbeat_relay_->Heartbeat(hb);
  // The controller's own answers (OK, NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT, ...) stand;
  // the relay's failures (it is down, full, or the batch failed) send this heartbeat direct.
  const absl::StatusCode code = resp.status().code();
  const bool relay_failed =
      code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
      code == absl::StatusCode::kResourceExhausted || code == absl::StatusCode::kUnimplemented ||
      code == absl::StatusCode::kInternal || code == absl::StatusCode::kUnknown ||
      code == absl::StatusCode::kCancelled;
  if (!relay_failed) {
    if (relay_failing_) {
      DHP_LOG(INFO) << "heartbeats go through the relay " << heartbeat_relay_->target()
                    << " again";
    }
    relay_failing_ = false;
    return resp;
  }
  if (!relay_failing_) {
    DHP_LOG(WARNING) << "the heartbeat relay " << heartbeat_relay_->target() << " failed ("
                     << resp.status() << "); heartbeats go to the controller "
                     << client_.target() << " directly, and to the relay again once it answers"
                     << " (tried every " << options_.relay_retry_ms << " ms)";
  }
  relay_failing_ = true;
  relay_retry_at_ = SteadyClock::now() + std::chrono::milliseconds(options_.relay_retry_ms);
  return client_.Heartbeat(hb);
}

absl::StatusOr<v1::HeartbeatResponse> Agent::StreamBeat(const v1::HeartbeatRequest& hb) {
  const bool was_streaming = beats_.streaming();
  const int opened = beats_.opened();
  absl::StatusOr<v1::HeartbeatResponse> resp = beats_.Beat(hb);
  if (beats_.opened() > opened) {
    DHP_LOG(INFO) << "heartbeats on a WorkerService.HeartbeatStream (stream " << beats_.opened()
                  << " of this agent)";
  }
  if (was_streaming && !beats_.streaming()) {
    DHP_LOG(INFO) << "the controller has no HeartbeatStream: heartbeats are unary calls";
  }
  return resp;
}

void Agent::RetainRelayed(const v1::HeartbeatRequest& hb, const v1::HeartbeatResponse& resp) {
  std::set<RankKey> live;
  for (const v1::RankStatus& s : hb.ranks()) live.insert({s.job_id(), s.attempt(), s.world_rank()});
  for (const v1::RankLaunch& l : resp.ranks()) live.insert(RankKey::Of(l));
  relay_.Retain(live);
}

void Agent::StartProgressRelay() {
  if (!options_.relay_progress) return;
  std::string path = options_.progress_socket;
  if (path.empty()) {
    absl::StatusOr<std::string> in_logs = ProgressSocketIn(options_.ranks.log_dir);
    if (in_logs.ok()) {
      path = *in_logs;
    } else {
      DHP_LOG(INFO) << "the ranks' socket goes in a private directory under /tmp: "
                    << in_logs.status();
    }
  }
  absl::StatusOr<std::unique_ptr<ProgressServer>> server = ProgressServer::Start(relay_, path);
  if (!server.ok()) {
    DHP_LOG(WARNING) << "not relaying the ranks' progress (they report to the controller "
                     << "themselves): " << server.status();
    return;
  }
  progress_server_ = std::move(*server);
  launcher_.set_progress_via(progress_server_->target());
  DHP_LOG(INFO) << "ranks report progress to " << progress_server_->target()
                << "; heartbeats carry it to the controller";
}

void Agent::PollRanks() {
  launcher_.Poll();
  shipper_.Track(launcher_.Logs());
}

void Agent::ShipLogs() {
  absl::Status status = shipper_.Ship();
  if (!status.ok() && shipping_ok_) {
    DHP_LOG(WARNING) << "shipping rank logs failed (will retry): " << status;
  } else if (status.ok() && !shipping_ok_) {
    DHP_LOG(INFO) << "shipping rank logs again";
  }
  shipping_ok_ = status.ok();
}

void Agent::ShipLogsLoop() {
  while (WaitFor(options_.log_ship_ms)) ShipLogs();
}

int Agent::Run() {
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  shipper_.Adopt(FindRankLogs(options_.ranks.log_dir, now_s - options_.adopt_logs_max_age_s));
  if (shipper_.tracked() > 0) {
    DHP_LOG(INFO) << "shipping what is left of " << shipper_.tracked() << " rank logs under "
                  << options_.ranks.log_dir;
  }
  StartProgressRelay();
  std::thread shipping([this] { ShipLogsLoop(); });
  int registrations = 0;
  int backoff = options_.retry_initial_ms;
  bool need_register = true;
  SteadyClock::time_point next = SteadyClock::now();  // the next register or heartbeat
  while (WaitFor(std::min(options_.tick_ms, MillisUntil(next)))) {
    PollRanks();
    if (SteadyClock::now() < next) continue;
    if (need_register) {
      if (Register(&heartbeat_ms_)) {
        ++registrations;
        need_register = false;
        backoff = options_.retry_initial_ms;  // and heartbeat at once: report the ranks
      } else {
        next = SteadyClock::now() + std::chrono::milliseconds(backoff);
        backoff = std::min(backoff * 2, options_.retry_max_ms);
      }
      continue;
    }
    if (Heartbeat() == Beat::kNotFound) {
      registered_ = false;
      need_register = true;
    } else {
      next = SteadyClock::now() + std::chrono::milliseconds(heartbeat_ms_);
    }
  }
  shipping.join();
  Shutdown();
  progress_server_.reset();  // every rank has exited: the socket goes
  return registrations;
}

void Agent::Shutdown() {
  if (!launcher_.AllExited()) {
    DHP_LOG(INFO) << "stopping " << launcher_.tracked() << " rank processes with SIGTERM: "
                  << "each checkpoints and exits within its job's restart.preemption_grace_s "
                  << "(else --stop-grace-ms " << options_.ranks.stop_grace_ms << " ms)";
  }
  launcher_.StopAll();
  // While the ranks checkpoint and exit, heartbeats (stopping) keep the node from being LOST
  // and new ranks off it, and report each exit; the first goes at once. After a failed one the
  // next waits at least retry_max_ms: a hung controller costs a deadline per try, not per tick.
  SteadyClock::time_point next_beat = SteadyClock::now();
  while (true) {
    PollRanks();
    if (launcher_.AllExited()) break;
    if (registered_ && SteadyClock::now() >= next_beat) {
      const int wait_ms = Heartbeat() == Beat::kOk ? heartbeat_ms_
                                                   : std::max(heartbeat_ms_, options_.retry_max_ms);
      next_beat = SteadyClock::now() + std::chrono::milliseconds(wait_ms);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(options_.tick_ms, 20)));
  }
  shipper_.Track(launcher_.Logs());
  if (shipper_.tracked() > 0) ShipLogs();  // best effort: the last output of the ranks
  if (!registered_) return;
  // The final report: the exits, and (stopping) that this agent is leaving. Bounded by the
  // client's deadline; the controller's answer no longer matters.
  if (Heartbeat() != Beat::kOk) DHP_LOG(WARNING) << "final heartbeat (stopping) failed";
}

}  // namespace dhp::worker
