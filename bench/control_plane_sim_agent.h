// A simulated dhp-worker agent's state and the messages it sends, without processes or RPCs:
// what worker/agent/agent.cc and rank_launcher.cc keep and send, reduced to what the controller
// sees. bench/control_plane_fleet.h drives many of these over gRPC.
//
// Thread-safety: plain data; one thread at a time per agent.
#ifndef DHP_BENCH_CONTROL_PLANE_SIM_AGENT_H_
#define DHP_BENCH_CONTROL_PLANE_SIM_AGENT_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "dhp/v1/service.pb.h"

namespace dhp::bench {

// A rank process as a simulated agent pretends to run it.
struct SimRank {
  std::string job_id;
  int32_t attempt = 0;
  int32_t world_rank = 0;
  int64_t pid = 0;
  bool wanted = true;      // listed in the latest HeartbeatResponse
  bool reported = false;   // a heartbeat that reported it RUNNING was answered OK
  bool exit_sent = false;  // unwanted, and the heartbeat in flight reports it EXITED
  bool reports = false;    // sends ReportProgress: world rank 0, or every rank (see the fleet)
  int64_t step = 0;        // the last step it reported
  bool progress_in_flight = false;
  bool stopped = false;  // the controller said stop (or the attempt is gone)
  // Relayed progress: its newest report, which the agent's next heartbeat carries.
  bool relay_pending = false;
  v1::ReportProgressRequest pending;
  // Whether this rank sends ReportProgress now: a reporting rank, once known RUNNING.
  bool Reporting() const { return reports && reported && wanted && !stopped; }
};

struct SimAgent {
  std::string id;
  int channel = 0;
  bool registered = false;
  bool hb_in_flight = false;
  bool stream_unimplemented = false;  // the controller has no HeartbeatStream: unary heartbeats
  int64_t hb_interval_ns = 2000000000;
  int64_t hb_due = 0;        // the pending heartbeat timer (0: none)
  int64_t progress_due = 0;  // the pending progress timer (0: none)
  // The controller's latest ReportProgressResponse.next_report_ms to any of its ranks, in ns:
  // its ranks report no more often than this (as RankReporter).
  int64_t progress_pace_ns = 0;
  int64_t register_due = 0;  // the pending registration retry (0: none)
  int64_t last_sent_ns = 0;  // the last heartbeat sent
  int backoff_ms = 200;
  std::vector<SimRank> ranks;
  // The (job, attempt, rank) of each relayed report the heartbeat in flight carries, in order.
  std::vector<std::tuple<std::string, int32_t, int32_t>> relayed;
  int counted_ranks = 0, counted_reporting = 0;  // what the fleet's gauges hold for it
};

// The agent's node: `gpus` GPUs of `gpu_memory_bytes` each, 2 TiB of host memory.
void FillRegisterRequest(const SimAgent& a, int gpus, int64_t gpu_memory_bytes,
                         v1::RegisterNodeRequest* req);

// Every rank the agent tracks: RUNNING while wanted, else EXITED as stopped by the agent (then
// marked exit_sent); and the ranks' relayed reports not yet sent (into a.relayed).
void FillHeartbeatRequest(SimAgent& a, v1::HeartbeatRequest* req);

// After a heartbeat was answered OK: the ranks it reported RUNNING are `reported`, the exits it
// carried are forgotten, and the response's ranks are the wanted set (new ones start, not yet
// reported; `*next_pid` numbers them; world rank 0, or all with `every_rank_reports`, report
// progress). Returns whether some rank now reports progress.
bool ApplyHeartbeatResponse(SimAgent& a, const v1::HeartbeatResponse& resp, int64_t* next_pid,
                            bool every_rank_reports);

// After a heartbeat failed: the exits it carried go again with the next one.
void HeartbeatFailed(SimAgent& a);

// The next step of rank `r`, as a rank that takes `step_ms` per step. With `rank_metrics`, the
// request carries the 24 metrics a dhp-rank on a GPU sends (worker/rank/rank_metrics.cc and
// JobRank::StepMetrics) for a rank that hosts both stages of control_plane_cases.cc's job:
// throughput and MFU per stage, the step's four phases, four memory figures, bytes on its five
// process groups, and the step's gradient norm, learning rate and batch counts.
void FillProgressRequest(SimRank& r, int step_ms, bool rank_metrics,
                         v1::ReportProgressRequest* req);

// The rank of `a` with that key, or nullptr.
SimRank* FindRank(SimAgent& a, const std::string& job_id, int32_t attempt, int32_t world_rank);

}  // namespace dhp::bench

#endif  // DHP_BENCH_CONTROL_PLANE_SIM_AGENT_H_
