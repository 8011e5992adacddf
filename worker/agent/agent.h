// Agent: the dhp-worker daemon. Registers this node with the controller, heartbeats, and runs
// the rank processes the controller asks for.
//
// Heartbeats are unary calls, or with heartbeat_stream messages on one api::HeartbeatStream.
// With relay_progress (the default) they also carry the ranks' progress reports, which the
// ranks send to the agent's ProgressServer (progress_relay.h).
// Every heartbeat reports the node's rank processes (RankLauncher::Statuses, running or exited) and
// the response, the complete set of ranks the node should run, is reconciled: missing ranks start,
// unwanted ones are stopped (SIGTERM, SIGKILL after the grace). Between heartbeats a short tick
// reaps exits and escalates stops. A second thread ships the rank logs (LogShipper) every
// log_ship_ms. When the controller has forgotten the node (NOT_FOUND) the agent registers again;
// while it is unreachable the agent retries with backoff and keeps its ranks running, so a
// controller restart kills no job. Stop ends the loop and stops every rank (waiting up to the grace
// period), heartbeating meanwhile, ships the last output and reports the exits once more; every
// heartbeat from Stop on says `stopping`, so that the controller places no new ranks on the node
// while it leaves (each is bounded by the client's deadline). An agent that starts after one that
// died (SIGKILL, OOM, a node upgrade) first adopts the rank logs its predecessor's ranks left under
// the log directory (FindRankLogs, at most adopt_logs_max_age_s old), so their last lines, often
// the reason they ended, still reach the controller.
//
// Thread-safety: Run blocks on the calling thread (and owns the launcher); Stop may be called
// from any thread.
#ifndef DHP_WORKER_AGENT_AGENT_H_
#define DHP_WORKER_AGENT_AGENT_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "api/client.h"
#include "dhp/v1/node.pb.h"
#include "worker/agent/log_shipper.h"
#include "worker/agent/progress_relay.h"
#include "worker/agent/progress_server.h"
#include "worker/agent/rank_launcher.h"

namespace dhp::worker {

struct AgentOptions {
  v1::Node node;                 // id, hostname, address, resources, agent_version
  int retry_initial_ms = 200;    // backoff while the controller is unreachable
  int retry_max_ms = 5000;
  RankLauncherOptions ranks;     // how ranks run (node_id defaults to node.id())
  int tick_ms = 100;             // reap exited ranks, escalate stops
  int log_ship_ms = 500;         // ship new rank output
  // Heartbeats on one WorkerService.HeartbeatStream instead of a unary call each. Off by
  // default: measured at 10,000 simulated agents, the controller spent more CPU and memory on
  // 10,000 open streams than on 5,000 calls a second (bench/results/control_plane.md).
  bool heartbeat_stream = false;
  // The ranks report progress to this agent, which carries it in its heartbeats
  // (ProgressRelay): the controller then takes no call per rank report. The ranks' socket is
  // progress_socket; when empty, ranks.log_dir/progress.sock, or one in a private directory
  // under /tmp where that cannot be (ProgressSocketIn). Off: every rank reports to the
  // controller itself (as do the ranks of an agent whose socket failed).
  bool relay_progress = true;
  std::string progress_socket;
  // At start, rank logs under ranks.log_dir modified this recently are shipped (what the
  // ranks of a previous agent on this node wrote before they ended with it).
  int64_t adopt_logs_max_age_s = 24 * 3600;
  // After the heartbeat relay fails, heartbeats go to the controller directly for this long
  // before the relay is tried again: a relay that hangs costs one deadline per retry, not one
  // per heartbeat (which, at a 5 s deadline, would leave the controller a beat every 7 s).
  int relay_retry_ms = 30000;
};

class Agent {
 public:
  // With `heartbeat_relay` (a client of a dhp-relay; it must outlive this), heartbeats go to
  // the relay, and to `client` when the relay cannot answer (down, overloaded, or past its
  // deadline; then for options.relay_retry_ms): a relay saves the controller work but is never
  // needed. Everything else
  // (registration, logs) goes to `client`. heartbeat_stream is then ignored.
  Agent(api::DhpClient& client, AgentOptions options, api::DhpClient* heartbeat_relay = nullptr);

  // Runs until Stop, then stops the ranks. Returns the number of successful registrations.
  int Run();
  void Stop();
  bool registered() const { return registered_.load(); }

 private:
  enum class Beat { kOk, kNotFound, kFailed };

  static AgentOptions WithDefaults(AgentOptions options);
  bool Register(int* heartbeat_ms);
  Beat Heartbeat();
  void PollRanks();
  void ShipLogs();
  void ShipLogsLoop();
  void Shutdown();
  // With relay_progress: listens for the ranks' reports, which launches then point at.
  void StartProgressRelay();
  // One heartbeat on beats_, logging each stream it opens and a fallback to unary calls.
  absl::StatusOr<v1::HeartbeatResponse> StreamBeat(const v1::HeartbeatRequest& hb);
  // One heartbeat through heartbeat_relay_, or directly when the relay fails.
  absl::StatusOr<v1::HeartbeatResponse> RelayedBeat(const v1::HeartbeatRequest& hb);
  // After an answered heartbeat `hb`: keeps the relay's ranks to those reported or wanted.
  void RetainRelayed(const v1::HeartbeatRequest& hb, const v1::HeartbeatResponse& resp);
  // Waits up to `ms`; false when stopped (at once or meanwhile).
  bool WaitFor(int ms);
  bool Stopped();

  api::DhpClient& client_;
  api::HeartbeatStream beats_;  // with heartbeat_stream (unary against older controllers)
  api::DhpClient* const heartbeat_relay_;  // null: none
  bool relay_failing_ = false;             // the last relayed heartbeat went direct (Run's thread)
  std::chrono::steady_clock::time_point relay_retry_at_;  // while failing: direct until then
  const AgentOptions options_;
  RankLauncher launcher_;  // used by Run's thread only
  LogShipper shipper_;     // thread-safe
  ProgressRelay relay_;    // thread-safe
  std::unique_ptr<ProgressServer> progress_server_;  // with relay_progress, once started
  std::atomic<bool> registered_{false};
  int heartbeat_failures_ = 0;  // in a row (Run's thread only)
  int heartbeat_ms_ = 0;        // as the controller asked at registration (Run's thread only)
  // The last ShipLogs result: ShipLogs runs on the shipping thread and before a heartbeat that
  // reports an exit.
  std::atomic<bool> shipping_ok_{true};
  std::mutex mu_;  // guards stopped_ (with cv_ for interruptible waits)
  std::condition_variable cv_;
  bool stopped_ = false;
};

}  // namespace dhp::worker

#endif  // DHP_WORKER_AGENT_AGENT_H_
