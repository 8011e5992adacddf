// AgentFleet's shard (control_plane_fleet.h): one thread and completion queue driving its
// share of the simulated agents over gRPC. control_plane_shard.cc has its loop (timers,
// completions, counters); control_plane_shard_traffic.cc what the agents send and do with the
// answers (registration, heartbeats, progress reports). Internal to control_plane_fleet.
#ifndef DHP_BENCH_CONTROL_PLANE_SHARD_H_
#define DHP_BENCH_CONTROL_PLANE_SHARD_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "bench/control_plane_fleet.h"
#include "bench/control_plane_fleet_stream.h"
#include "bench/control_plane_relay_inbox.h"
#include "bench/control_plane_sim_agent.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "worker/relay/heartbeat_batcher.h"

namespace dhp::bench {
namespace fleet {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr int64_t kMs = 1000000;
constexpr int64_t kStopWaitNs = 30000 * kMs;  // for cancelled calls to complete

// One unary RPC in flight; its address is the completion-queue tag.
struct Call : fleet::Tag {
  explicit Call(Kind k) : Tag(k) {}
  int64_t due_ns = 0, sent_ns = 0;
  std::string job_id;  // progress
  int32_t attempt = 0;
  int32_t world_rank = 0;
  grpc::ClientContext ctx;
  grpc::Status status;
  v1::RegisterNodeRequest reg_req;
  v1::RegisterNodeResponse reg_resp;
  v1::HeartbeatRequest hb_req;
  v1::HeartbeatResponse hb_resp;
  v1::ReportProgressRequest prog_req;
  v1::ReportProgressResponse prog_resp;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::RegisterNodeResponse>> reg_reader;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::HeartbeatResponse>> hb_reader;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReportProgressResponse>> prog_reader;
};

struct Timer {
  int64_t due;
  uint32_t agent;
  Kind kind;
  bool operator>(const Timer& o) const { return due > o.due; }
};

}  // namespace fleet

class AgentFleet::Shard {
  using Call = fleet::Call;
  using Kind = fleet::Kind;
  using RelayedBeat = fleet::RelayedBeat;
  using Timer = fleet::Timer;

 public:
  Shard(const FleetOptions& o, int index, std::atomic<bool>& recording)
      : o_(o), recording_(recording), rng_(12345 + index) {}

  void AddAgent(const std::string& id);

  // `heartbeats`: the channels the agents' unary heartbeats go on (empty: `channels`);
  // `relays`: the in-process relays they go to instead (empty: none).
  void Start(std::vector<std::shared_ptr<grpc::Channel>> channels,
             std::vector<std::shared_ptr<grpc::Channel>> heartbeats,
             std::vector<worker::HeartbeatBatcher*> relays);
  void RequestStop() { stop_ = true; }
  // Joins the thread; false when it had to abandon calls that never completed (then the
  // completion queue must not be destroyed: the caller leaks the shard).
  bool Join();
  int64_t registered() const { return registered_.load(); }

  void AddCounters(FleetCounters* c) const;
  void TakeSamples(FleetSamples* out);

 private:
  // ---- the loop ------------------------------------------------------------------------------

  void Run();
  void Arm(uint32_t agent, Kind kind, int64_t due);
  void Fire(const Timer& t, int64_t now);
  Call* NewCall(Kind kind, uint32_t agent, int deadline_ms);

  // The gauges of calls (heartbeats on streams included) and streams.
  void CountInFlight();

  // ---- registration ----------------------------------------------------------------------------

  void PumpRegistrations();
  void OnRegistered(Call* c, int64_t now);

  // ---- heartbeats ------------------------------------------------------------------------------

  // On the agent's HeartbeatStream in heartbeat_stream mode (unless the controller has none),
  // else a unary Heartbeat.
  void SendHeartbeat(uint32_t i, int64_t due, int64_t now);

  // A heartbeat on a stream is over (fleet::HeartbeatStreams).
  void OnStreamBeat(const fleet::StreamBeat& b);

  // A heartbeat sent at `sent_ns` (unary or on a stream) answered at `now` with `status` and,
  // when OK, `resp`.
  void OnHeartbeat(uint32_t i, const grpc::Status& status, const v1::HeartbeatResponse& resp,
                   int64_t sent_ns, int64_t now);

  // What the response wants (like RankLauncher::Reconcile, without processes); the first
  // progress report soon after a run's rank 0 is known RUNNING (STARTING -> RUNNING).
  void Reconcile(uint32_t i, const v1::HeartbeatResponse& resp, int64_t now);

  // Keeps the fleet's gauges (ranks run, runs reporting) in step with agent `a`.
  void Recount(SimAgent& a);

  // ---- progress --------------------------------------------------------------------------------

  void SendProgress(uint32_t i, int64_t now);
  void OnProgress(Call* c, int64_t now);

  // The reports the answered heartbeat relayed (relay_progress): each answer as a call's. A
  // controller that answered fewer than it was sent counts the rest as UNIMPLEMENTED.
  void OnRelayedAnswers(uint32_t i, const v1::HeartbeatResponse& resp, int64_t latency_ns);

  // One progress report answered (a call, or relayed in a heartbeat).
  void CountProgress(uint32_t i, const std::string& job_id, int32_t attempt, int32_t world_rank,
                     const grpc::Status& status, const v1::ReportProgressResponse& resp,
                     int64_t latency_ns);

  // ---- in-process relays ----------------------------------------------------------------------

  // The inbox's alarm came back: handle what the relays answered since it was set.
  void OnWake(bool stopping);

  // ---- completions -----------------------------------------------------------------------------

  // `ok` matters to stream operations only (a unary call's Finish always completes OK).
  void Complete(fleet::Tag* tag, bool ok, bool stopping);

  // The longest time an agent went without sending a heartbeat, while recording: checked on
  // every send and, for agents that stopped sending altogether, by a scan every second.
  void NoteGap(int64_t gap);
  void ScanSilence();

  // Cancelled calls and streams should complete at once; report those that did not in
  // kStopWaitNs.
  void DescribeStuckCalls();
  void NoteError(const std::string& e);

  const FleetOptions& o_;
  std::atomic<bool>& recording_;
  std::atomic<bool> stop_{false};
  bool abandoned_ = false;  // written by the thread before it ends, read after Join
  std::thread thread_;
  grpc::CompletionQueue cq_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs_;
  std::vector<std::shared_ptr<grpc::Channel>> hb_channels_;  // to relays (empty: none)
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> hb_stubs_;
  // heartbeat_stream: the agents' streams; declared after cq_, so destroyed before it.
  std::unique_ptr<fleet::HeartbeatStreams> streams_;
  std::vector<worker::HeartbeatBatcher*> relays_;  // in-process relays (empty: none)
  // Their answers, from their sender threads (declared after cq_, so destroyed before it).
  fleet::Tag wake_tag_{Kind::kWake};
  fleet::RelayInbox inbox_{&cq_, &wake_tag_};

  // Owned by the shard's thread.
  std::vector<SimAgent> agents_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::deque<uint32_t> to_register_;
  int registering_ = 0, register_limit_ = 1;
  std::unordered_set<Call*> in_flight_;
  std::mt19937_64 rng_;
  int64_t next_pid_ = 0;
  int64_t next_scan_ns = 0;

  // Read by other threads.
  std::atomic<int64_t> registered_{0}, registrations_{0}, reregistrations_{0},
      register_failures_{0}, hb_ok_{0}, hb_failed_{0}, hb_deadline_{0}, prog_ok_{0},
      prog_failed_{0}, prog_stop_{0}, ranks_{0}, reporting_{0}, in_flight_count_{0},
      streams_opened_{0}, streams_open_{0}, stream_fallbacks_{0};
  mutable std::mutex mu_;  // guards samples_ and first_error_
  FleetSamples samples_;
  std::string first_error_;
};

}  // namespace dhp::bench

#endif  // DHP_BENCH_CONTROL_PLANE_SHARD_H_
