// AgentFleet: N simulated dhp-worker agents against one controller, over real gRPC, driven by
// gRPC's asynchronous client (CompletionQueue) on a few threads and a few HTTP/2 connections,
// not a thread per agent.
//
// Each simulated agent (state and messages: bench/control_plane_sim_agent.h) does what
// worker/agent/agent.cc does, minus processes:
//   - Starts at a random moment within start_spread_ms (by default one heartbeat interval, so
//     that heartbeats are spread over the interval as on a real cluster, not in one burst).
//   - RegisterNode with 8 GPUs (80 GB each), then a Heartbeat at once and every
//     heartbeat_interval_ms (from RegisterNodeResponse) after the previous one's response, one
//     at a time, with dhp-worker's 5 s deadline; on NOT_FOUND it registers again.
//   - With heartbeat_stream, as dhp-worker's HeartbeatStream (api/client.h): the heartbeats go
//     on one WorkerService.HeartbeatStream per agent instead, opened by its first heartbeat
//     after registering. Each heartbeat writes its request and reads the answer on it (both
//     pending at once), timed from the write to the read; the same 5 s deadline per heartbeat
//     cancels the stream and counts as DEADLINE_EXCEEDED. A read that fails means the
//     controller ended the stream: Finish's status counts as the unary call's would (NOT_FOUND:
//     register again; else failed), and the next heartbeat opens a new stream. Against a
//     controller without the method (UNIMPLEMENTED) an agent falls back to unary heartbeats,
//     counted in stream_fallbacks. The streams: bench/control_plane_fleet_stream.h.
//   - Every RankLaunch in a HeartbeatResponse becomes a "rank" that the following heartbeats
//     report RUNNING (so the job goes SCHEDULED -> STARTING); a rank no longer listed is
//     reported EXITED (stopped_by_agent) once and forgotten.
//   - Once a heartbeat has reported it RUNNING, world rank 0 of each run (every rank with
//     every_rank_reports, as dhp-rank does) sends ReportProgress with step 1, 2, 3, ... every
//     progress_interval_ms, or less often when the controller's last answer to one of the
//     agent's ranks asked so (next_report_ms, as RankReporter honours it); an agent's ranks
//     report together. The job goes RUNNING and keeps advancing.
//   - With relay_progress, as dhp-worker's ProgressRelay: a rank's report is not a call but
//     the newest report of that rank, which the agent's next heartbeat carries
//     (HeartbeatRequest.progress); each ProgressAnswer counts as the call's answer would (its
//     latency: the heartbeat's). Reports carried by a heartbeat that failed are lost (the
//     rank's next one is newer).
//
// The agents are split into `threads` shards. A shard owns its agents, one CompletionQueue, its
// channels and a timer heap; its thread sends what is due and handles completions (AsyncNext
// with the next due time as deadline), so no agent state is shared between threads. The
// channels use private subchannel pools: `channels` HTTP/2 connections in all (with
// heartbeat_stream, the agents' streams are multiplexed over them too). Every pending operation
// has its own completion-queue tag: a unary call, or one of a stream's StartCall, Write, Read
// and Finish. Stop cancels every call and stream and waits until each tag came back before it
// shuts the queue down.
//
// Thread-safety: Start, Stop and the accessors may be called from any one thread; the counters
// and samples are read under locks or atomics.
#ifndef DHP_BENCH_CONTROL_PLANE_FLEET_H_
#define DHP_BENCH_CONTROL_PLANE_FLEET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dhp::api {
class DhpClient;
}  // namespace dhp::api
namespace dhp::worker {
class HeartbeatBatcher;
}  // namespace dhp::worker

namespace dhp::bench {

struct FleetOptions {
  std::string target;  // host:port of the controller's gRPC server
  int nodes = 1000;
  int threads = 2;                   // shards, one completion-queue thread each
  int channels = 8;                  // HTTP/2 connections in all, spread over the shards
  int register_concurrency = 64;     // RegisterNode calls in flight at once, all shards
  int start_spread_ms = 2000;        // agents start at uniformly random moments over this
  int heartbeat_deadline_ms = 5000;  // dhp-worker's client deadline
  int rpc_deadline_ms = 10000;       // RegisterNode, ReportProgress
  int progress_interval_ms = 5000;   // per reporting rank, at least (next_report_ms)
  bool every_rank_reports = false;   // false: only world rank 0 of each run reports
  bool rank_metrics = false;         // reports carry a GPU rank's metrics (FillProgressRequest)
  bool heartbeat_stream = false;     // heartbeats on one HeartbeatStream per agent, not unary
  bool relay_progress = false;       // the ranks' reports go in heartbeats, not calls
  int gpus_per_node = 8;
  int64_t gpu_memory_bytes = int64_t{81559} << 20;  // nvidia-smi's 80 GB (81,559 MiB)
  std::string node_prefix = "sim-node-";
  // Heartbeat relays (dhp-relay, host:port): when set, the agents' unary heartbeats go to these
  // over `channels` connections of their own (agent i's to the relay of its channel), as
  // dhp-worker --heartbeat-relay sends them; registration and progress still go to `target`,
  // over controller_channels connections (0: `channels`).
  std::vector<std::string> heartbeat_targets;
  int controller_channels = 0;
  // Relays inside this process: when > 0, the agents' heartbeats go to this many
  // worker::HeartbeatBatcher (dhp-relay's own batching; agent i's to batcher i % N), each with
  // its own connection to `target` and relay_window_ms. The controller receives what it would
  // from N dhp-relay processes on the racks' hosts, while this machine pays neither the relays'
  // CPU nor an agent-to-relay call per heartbeat. A heartbeat's latency is then the relay's:
  // its wait for the batch plus the HeartbeatBatch call. Registration and progress calls go to
  // `target` over controller_channels connections (0: `channels`). Excludes heartbeat_targets
  // and heartbeat_stream.
  int in_process_relays = 0;
  int relay_window_ms = 20;
  // gRPC channel arguments set on every channel (e.g. grpc.http2.bdp_probe = 0).
  std::vector<std::pair<std::string, int>> channel_args;
};

// Totals since Start.
struct FleetCounters {
  int64_t registered = 0;       // agents registered now
  int64_t registrations = 0;    // successful RegisterNode calls (re-registrations included)
  int64_t reregistrations = 0;  // after a heartbeat answered NOT_FOUND
  int64_t register_failures = 0;
  int64_t heartbeats_ok = 0, heartbeats_failed = 0, heartbeats_deadline = 0;
  int64_t progress_ok = 0, progress_failed = 0, progress_stop = 0;
  int64_t ranks = 0;           // ranks the agents run now (wanted by the controller)
  int64_t reporting_runs = 0;  // ranks that report progress now (rank 0s, or all)
  int64_t in_flight = 0;       // calls in flight now (heartbeats on streams included)
  int64_t streams_opened = 0;  // HeartbeatStreams opened (heartbeat_stream)
  int64_t streams_open = 0;    // open now, or not yet finished
  int64_t stream_fallbacks = 0;  // agents that went unary: the controller has no HeartbeatStream
  std::string first_error;
};

// What happened while recording was on (SetRecording(true) .. TakeSamples()).
struct FleetSamples {
  std::vector<int64_t> heartbeat_ns;  // latency of each heartbeat answered, OK or deadline
  std::vector<int64_t> lag_ns;        // per heartbeat sent: send time - due time
  std::vector<int64_t> progress_ns;   // latency of each ReportProgress answered
  int64_t heartbeats_ok = 0, heartbeats_failed = 0, heartbeats_deadline = 0;
  int64_t progress_ok = 0, progress_failed = 0;
  // The longest an agent went without sending a heartbeat (between two sends, or from its last
  // send to a check): above the controller's heartbeat timeout, a LOST would be the
  // generator's fault.
  int64_t max_heartbeat_gap_ns = 0;
  std::string first_error;
};

class AgentFleet {
 public:
  explicit AgentFleet(FleetOptions options);
  ~AgentFleet();  // Stop()
  AgentFleet(const AgentFleet&) = delete;
  AgentFleet& operator=(const AgentFleet&) = delete;

  // Connects the channels (and starts the in-process relays) and starts the shard threads; the
  // agents register at once, register_concurrency at a time.
  void Start();
  // Cancels the calls and streams in flight and joins the threads (those that still have not
  // completed 30 s later are abandoned, with a message on stderr), then stops the in-process
  // relays (what they hold is sent, and its answers dropped). Idempotent.
  void Stop();

  const FleetOptions& options() const { return options_; }
  int64_t Registered() const;
  FleetCounters Counters() const;
  // Starts (true) or pauses (false) recording samples; TakeSamples returns and clears them.
  void SetRecording(bool on);
  FleetSamples TakeSamples();

 private:
  class Shard;
  const FleetOptions options_;
  std::atomic<bool> recording_{false};
  std::vector<std::unique_ptr<Shard>> shards_;
  // in_process_relays: each batcher's connection to the controller, and the batchers; they
  // answer into the shards, so Stop ends them after the shards' threads.
  std::vector<std::unique_ptr<api::DhpClient>> relay_clients_;
  std::vector<std::unique_ptr<worker::HeartbeatBatcher>> relays_;
  bool started_ = false;
};

}  // namespace dhp::bench

#endif  // DHP_BENCH_CONTROL_PLANE_FLEET_H_
