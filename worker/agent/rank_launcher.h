// RankLauncher: reconciles the rank processes of one node with the set the controller wants
// (the ranks of every HeartbeatResponse), independent of gRPC.
//
// Reconcile starts each (job, attempt, world rank) it has never started (an exited rank of a
// still-wanted attempt is never restarted: only a new attempt starts new processes), stops those
// running but no longer wanted (SIGINT, which ends dhp-rank at once, SIGKILL after
// stop_grace_ms; reported with stopped_by_agent) and forgets those exited and no longer wanted once Statuses has reported
// their exit. Every rank runs
//   <rank_binary> --controller <addr> --job <id> --attempt <a> --world-rank <r>
//       --world-size <w> --device <cpu|cuda:0> --data-root <dir> [--token-file <f>]
//       [--peak-tflops <t>]
// with OMP_NUM_THREADS=1, OMP_WAIT_POLICY=PASSIVE, OPENBLAS_NUM_THREADS=1, DHP_NODE_ID and, on a
// GPU, CUDA_VISIBLE_DEVICES=<slot>; its output goes to <log_dir>/<job>/attempt-<a>/rank-<r>.log.
//
// Thread-compatible: one thread at a time (the agent's loop thread). Destroying the launcher
// SIGKILLs and reaps whatever still runs.
#ifndef DHP_WORKER_AGENT_RANK_LAUNCHER_H_
#define DHP_WORKER_AGENT_RANK_LAUNCHER_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dhp/v1/service.pb.h"
#include "worker/agent/rank_process.h"

namespace dhp::worker {

struct RankLauncherOptions {
  std::string node_id;                // DHP_NODE_ID of the ranks
  std::string rank_binary = "dhp-rank";
  std::string controller;             // host:port, passed as --controller
  std::string token_file;             // passed as --token-file when not empty
  std::vector<std::string> tls_args;  // --ca-file F ... (api::TlsClientArgs), passed as is
  std::vector<std::string> extra_data_roots;  // each passed as --allow-data-root
  bool allow_any_data_path = false;           // passed as --allow-any-data-path
  std::string data_root = ".";
  std::string log_dir = "logs";
  // SIGINT/SIGTERM → SIGKILL; StopAll (SIGTERM) uses the launch's preemption_grace_s instead
  // when the controller set it.
  int stop_grace_ms = 10000;
  double peak_tflops = 0;             // passed as --peak-tflops when > 0 (MFU's denominator)
  // The agent's ProgressServer ("unix:PATH"), passed as --progress-via when not empty: the
  // ranks report progress there, and the agent relays it in its heartbeats.
  std::string progress_via;
};

// One rank process of one attempt of a job.
struct RankKey {
  std::string job_id;
  int attempt = 0;
  int world_rank = 0;

  static RankKey Of(const v1::RankLaunch& launch) {
    return {launch.job_id(), launch.attempt(), launch.world_rank()};
  }
  bool operator<(const RankKey& o) const {
    return std::tie(job_id, attempt, world_rank) < std::tie(o.job_id, o.attempt, o.world_rank);
  }
  bool operator==(const RankKey& o) const {
    return job_id == o.job_id && attempt == o.attempt && world_rank == o.world_rank;
  }
  std::string ToString() const;  // "job j attempt a rank r"
};

// A tracked rank's log file.
struct RankLog {
  RankKey key;
  std::string path;
};

// The rank logs under `log_dir` in the layout LogPath writes (<job>/attempt-<a>/rank-<r>.log)
// last modified at or after `modified_since_unix_s`: what an agent that restarted finds of the
// ranks that ended with its predecessor. Other files and names are skipped; a missing directory
// has none.
std::vector<RankLog> FindRankLogs(const std::string& log_dir, int64_t modified_since_unix_s);

class RankLauncher {
 public:
  explicit RankLauncher(RankLauncherOptions options);
  // Ranks started from now on report progress to `target` (RankLauncherOptions::progress_via).
  void set_progress_via(std::string target) { options_.progress_via = std::move(target); }

  // Starts, stops and forgets ranks so that the node runs `desired` (see the header comment).
  void Reconcile(const std::vector<v1::RankLaunch>& desired);
  // Reaps exited ranks and escalates stops whose grace ran out. Never blocks.
  void Poll();
  // Every tracked rank, running or exited (as of the last Poll). Marks the exits it reports as
  // reported, which lets the next Reconcile forget them.
  std::vector<v1::RankStatus> Statuses();
  // The log of every tracked rank that was started (for the LogShipper).
  std::vector<RankLog> Logs() const;
  // Stops every running rank (SIGTERM now, so that dhp-rank checkpoints at its next step
  // boundary and exits 75; SIGKILL after the grace, driven by Poll).
  void StopAll();
  bool AllExited() const;
  size_t tracked() const { return ranks_.size(); }

  // The command line, extra environment and log path of a rank (public for tests).
  std::vector<std::string> Argv(const v1::RankLaunch& launch) const;
  std::vector<std::pair<std::string, std::string>> Env(const v1::RankLaunch& launch) const;
  std::string LogPath(const RankKey& key) const;

 private:
  struct Rank {
    v1::RankLaunch launch;
    std::unique_ptr<RankProcess> process;  // null when it could not be started
    std::string start_error;               // why not
    bool stopped_by_agent = false;
    bool exit_reported = false;
    bool exit_logged = false;
    bool exited() const { return process == nullptr || process->exited(); }
  };

  void Start(const v1::RankLaunch& launch);
  // `signal`: SIGINT for a rank no longer wanted (it ends at once), SIGTERM when the agent
  // stops (preemption: the job checkpoints first).
  void Stop(const RankKey& key, Rank& rank, const char* why, int signal);
  static v1::RankStatus StatusOf(const RankKey& key, const Rank& rank);

  RankLauncherOptions options_;  // progress_via is set once, before the first Reconcile
  std::map<RankKey, Rank> ranks_;  // tracked: running, or exited and not yet forgotten
  std::set<RankKey> started_;      // every rank ever started (never started twice)
};

}  // namespace dhp::worker

#endif  // DHP_WORKER_AGENT_RANK_LAUNCHER_H_
