// One rank of a controller job, start to end: what dhp-rank runs (rank_main.cc) once it has
// asked the controller for the job (GetJob), and what tests drive in-process with an injected
// job description, an in-memory KV and a fake controller.
//
// RunJobRank(description, options, kv, control):
//   1. layout = LayoutForSpec(spec); options.world_size must equal layout.WorldSize().
//   2. Resuming (description.resume set): reads this rank's shard of that checkpoint, verifying
//      its size and CRC-32C first (worker/ckpt). Missing, corrupt, not this rank's shard or its
//      metadata not a rank state (ckpt::RankStateMeta::FromMetadata refuses it):
//      control.RejectCheckpoint{job, attempt, checkpoint id, rank, reason} and the result is
//      kCheckpointRejected (dhp-rank exits 3), before joining any process group.
//   3. Data (DistData: the spec's datasets under options.data_root), the model (CreateModelForSpec:
//      seed, init or model.weights_path), process groups and the "handoff" communicator over
//      `kv`, the DistTrainer with the spec's optimizer and schedule (TrainingConfigForSpec).
//      Resuming: DistTrainer::LoadState and DistData::Seek from the shard.
//   4. Steps start+1 .. total (training.max_steps, or from the epochs). Each: StepStarted, the
//      distributed step, one line to options.out:
//        step <n>/<total> loss <%.17g or -> lr <%g> grad_norm <%g> tokens_per_s <%g> step_s <%g>
//      (the loss is known on ranks with a text role; others print "-" and report NaN), then
//      StepFinished.
//   5. Checkpoints every checkpoint.every_steps steps (0: none but the last) and after the last
//      step, when the run has a checkpoint_dir: <checkpoint_dir>/step-<%08d step>/rank-<%05d rank>
//      .safetensors holding DistTrainer::State() and metadata (below), then
//      control.ReportCheckpoint{job, attempt, step, world size, dir, shard, write seconds},
//      retried while the controller does not answer (UNAVAILABLE, DEADLINE_EXCEEDED: down,
//      restarting or unreachable) for as long as that takes, backing off to 10 s, with a line
//      in the log once a minute of the outage ("rank <R>: checkpoint at step <S>:
//      ReportCheckpoint unanswered for 61 s (...); retrying every 10 s; 2 of at most 2
//      checkpoints in flight: the next checkpoint waits"; checkpoint_writer.h). Any other
//      answer (FAILED_PRECONDITION, NOT_FOUND, INVALID_ARGUMENT, ...) fails the rank.
//      Without a checkpoint_dir a note says checkpoints are off.
//      checkpoint.async_write (default on): the step boundary only snapshots the state to host
//      memory (rank_checkpoint.h); the write and the report run on a background thread while
//      training goes on (checkpoint_writer.h), at most options.checkpoints_in_flight (default
//      2) checkpoints in flight: the only bound on a controller outage, as a boundary that
//      would start one more waits for the oldest to be written and reported. A failed write or
//      report fails the rank at the next step boundary: "rank <R>: checkpoint at step <S>:
//      <cause>". Off: the step boundary writes and reports, as the writer would, before
//      training goes on.
//      Every end below (finished, stopped, preempted) first waits until every checkpoint in
//      flight is written and reported, and so does an error's. With the controller down this
//      wait has no time limit of its own; it ends when the controller answers (within the 10 s
//      back-off, plus the call's deadline, of its return: the report is taken, or refused,
//      e.g. FAILED_PRECONDITION when the attempt is no longer current, and the rank fails), or
//      when the rank is stopped: SIGTERM from an agent that stops (SIGKILL follows after the
//      job's restart.preemption_grace_s) or from an eviction (SIGKILL after its grace); SIGINT
//      from the agent, for a rank that the returned controller no longer wants (e.g. its run
//      failed: restart.stall_timeout_s), ends it at once. An agent keeps its ranks while the
//      controller is unreachable (worker/agent/agent.h), so a controller that never returns
//      leaves the rank waiting, as it leaves training waiting at the in-flight bound.
//   6. After every step the ranks agree (one all-reduce over "world" of two flags) on whether
//      any rank's control.stop_requested(), and whether any rank was asked for a checkpoint
//      now (control.checkpoint_requested_at() past the newest checkpoint this attempt wrote or
//      resumed from). A checkpoint now is written at that step, as in 5, by every
//      rank. On stop every rank ends after that step, without a checkpoint of its own:
//      kStopped (dhp-rank exits 0). A third flag says whether any rank got SIGTERM
//      (control.preempt_requested()): then every rank checkpoints at that step (unless it just
//      did), waits in a barrier until every shard is reported (so the controller holds the
//      checkpoint COMPLETE before any rank exits) and ends kPreempted (dhp-rank exits 75,
//      common/rank_exit.h).
//   Any other failure is a Status whose message starts with "rank <R>" and names the step and
//   the group when a collective failed (dhp-rank prints it and exits 1).
//
// Shard metadata: worker/ckpt/rank_state_format.h (ckpt::RankStateMeta: the job, attempt, step,
// world size and rank, layout, data position and the normalised spec, which makes a checkpoint
// readable without the controller, e.g. by `dhp-ckpt export`, ckpt_export.h).
//
// Thread-safety: RunJobRank may run on several threads at once (one per rank, each with its own
// control); LibTorch's thread count is the caller's business.
#ifndef DHP_WORKER_RANK_JOB_RANK_H_
#define DHP_WORKER_RANK_JOB_RANK_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dhp/v1/job.pb.h"
#include "dhp/v1/service.pb.h"
#include "worker/comm/kv_client.h"
#include "worker/rank/retry_unavailable.h"

namespace dhp {

// What the controller says about the job for this attempt.
struct JobDescription {
  v1::JobSpec spec;                      // normalised
  v1::Run run;                           // the run of this attempt
  std::optional<v1::Checkpoint> resume;  // run.resume_checkpoint_id's checkpoint, if any
};

// Picks the run of `attempt` and its resume checkpoint out of a GetJob response. NotFound when
// the job has no such run; FailedPrecondition when the run resumes from a checkpoint the
// response does not list.
absl::StatusOr<JobDescription> DescribeJobAttempt(const v1::GetJobResponse& job, int attempt);

// One step's progress, as the rank reports it (RankReporter's StepReport).
struct RankStepProgress {
  int64_t step = 0;
  double loss = 0;  // NaN when this rank has no text role
  int64_t total_steps = 0;
  double tokens_per_second = 0;  // global batch tokens / step time
  double step_seconds = 0;
  std::map<std::string, double> metrics;  // grad_norm, learning_rate, samples, tokens, ...
};

// The controller as one rank sees it. Production: progress and stop through RankReporter,
// checkpoints through DhpClient (rank_control.h); tests: a fake.
class RankControl {
 public:
  virtual ~RankControl() = default;
  virtual void StepStarted(int64_t step) = 0;
  virtual void StepFinished(const RankStepProgress& progress) = 0;
  // The controller asked the run to stop (cancel).
  virtual bool stop_requested() const = 0;
  // This rank got SIGTERM (preemption.h), or the controller asked (a drain of a node holding
  // the job's ranks): checkpoint at the next step boundary and stop.
  virtual bool preempt_requested() const = 0;
  // The newest step at (or after) which the controller asked for a checkpoint now; -1: never.
  virtual int64_t checkpoint_requested_at() const = 0;
  // Waits up to `timeout` for queued reports to be delivered.
  virtual void Flush(std::chrono::milliseconds timeout) = 0;
  // Called from the checkpoint writer's thread (checkpoint.async_write), concurrently with the
  // calls above.
  virtual absl::Status ReportCheckpoint(const v1::ReportCheckpointRequest& request) = 0;
  virtual absl::Status RejectCheckpoint(const v1::RejectCheckpointRequest& request) = 0;
};

struct JobRankOptions {
  std::string job_id;
  int attempt = 1;
  int world_rank = 0;
  int world_size = 0;  // must equal the job layout's world size
  std::string device = "cpu";
  std::string data_root = ".";
  // The spec's data paths must lie under data_root or one of these (worker/rank/data_roots.h);
  // dhp-rank turns this on unless told --allow-any-data-path. Off: any path.
  bool confine_data_paths = false;
  std::vector<std::string> extra_data_roots;
  std::string tokenizer_path;  // empty: DataPipeline's default
  // Dense peak TFLOP/s of the rank's device, MFU's denominator. 0: on a GPU the dense BF16
  // peak of its model when known (KnownGpuPeakFlops), on CPU none (no MFU reported).
  double peak_tflops = 0;
  // Rendezvous, collectives, and how long RejectCheckpoint is retried (checkpoint reports are
  // retried until the controller answers).
  std::chrono::milliseconds timeout = std::chrono::seconds(120);
  // Checkpoints written or being written and not yet reported, at most (>= 1; async writes
  // only): each holds a host copy of the rank's state.
  int checkpoints_in_flight = 2;
  std::string kv_namespace;  // prefix of the process groups' KV keys (tests)
  // Where step lines and notes go; defaults: stdout (flushed per line) and stderr.
  std::function<void(const std::string&)> out;
  std::function<void(const std::string&)> log;
  // Back-off between retries; default std::this_thread::sleep_for. Checkpoint reports call it
  // from the checkpoint writer's thread.
  std::function<void(std::chrono::milliseconds)> sleep;
};

enum class JobRankEnd {
  kFinished,            // every step done, the final checkpoint reported: exit 0
  kStopped,             // the controller asked to stop: exit 0
  kCheckpointRejected,  // the resume shard was missing or corrupt and was rejected: exit 3
  kPreempted,           // a rank got SIGTERM; all checkpointed at one step: exit 75
};

struct JobRankResult {
  JobRankEnd end = JobRankEnd::kFinished;
  int64_t last_step = 0;  // steps done when the rank ended
};

// dhp-rank's exit code for a result (0, 0, 3); errors exit 1.
int ExitCodeOf(JobRankEnd end);

absl::StatusOr<JobRankResult> RunJobRank(const JobDescription& job, const JobRankOptions& options,
                                         comm::KvClient& kv, RankControl& control);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_JOB_RANK_H_
