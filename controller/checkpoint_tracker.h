// CheckpointTracker: the controller's one home for checkpoint bookkeeping. It decides where a
// run writes its checkpoint (RunDirectory), records the shards ranks report and completes a
// checkpoint when every rank's shard is in, keeps only the newest complete ones
// (checkpoint.keep_latest) and drops partial ones they supersede, marks a checkpoint a rank
// could not read CORRUPT, and says where the next attempt resumes (ResumePoint).
//
// It touches no file: a completed checkpoint's manifest (the store's record as JSON, written as
// <directory>/manifest.json, readable without the controller) and the directories garbage
// collection freed wait in TakeManifests() / TakeDeletions() for the caller to write and delete
// off the loop thread. Every deletion lies inside the checkpoint root.
//
// The Supervisor owns one and checks that a report's run is current before calling it.
// Thread-safety: not thread-safe; used on the controller's loop thread only.
#ifndef DHP_CONTROLLER_CHECKPOINT_TRACKER_H_
#define DHP_CONTROLLER_CHECKPOINT_TRACKER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "controller/store.h"
#include "dhp/v1/service.pb.h"

namespace dhp::controller {

// The largest step (or shard size in bytes) a rank may report, in progress or a checkpoint:
// 2^53, so that every figure is exact as a JSON number and as a /metrics sample (a double).
inline constexpr int64_t kMaxReportedStep = int64_t{1} << 53;

class CheckpointTracker {
 public:
  // `root`: absolute; a run writes under <root>/<spec directory>/<job>/attempt-<a>, or under
  // <spec directory>/<job>/attempt-<a> when the spec names an absolute directory.
  CheckpointTracker(Store& store, const Clock& clock, std::string root);

  std::string RunDirectory(const v1::Job& job, int attempt) const;

  // One rank's shard of `run` (the job's current run): INVALID_ARGUMENT naming the field for a
  // step below 1, a world size not the run's, a rank out of range, a shard file that is not a
  // plain name, a path outside the run's directory. Records it (a report sent again replaces
  // the rank's shard; one for a finished checkpoint only returns it) and, when the last shard
  // is in, completes the checkpoint, queues its manifest and collects garbage. `resp` gets the
  // checkpoint as stored.
  absl::Status OnShard(const v1::Job& job, const v1::Run& run,
                       const v1::ReportCheckpointRequest& req,
                       v1::ReportCheckpointResponse* resp, std::vector<v1::Event>* events);

  // A rank could not use checkpoint req.checkpoint_id(): marks it CORRUPT (once) with the
  // rank's reason. Returns the reason line for ending the run; NOT_FOUND for another job's or
  // an unknown checkpoint.
  absl::StatusOr<std::string> Reject(const v1::Job& job, const v1::RejectCheckpointRequest& req,
                                     std::vector<v1::Event>* events);

  // The newest COMPLETE checkpoint of the job: where its next attempt starts.
  std::optional<v1::Checkpoint> ResumePoint(const std::string& job_id) const;

  std::vector<std::string> TakeDeletions();
  // (checkpoint directory, manifest JSON) of checkpoints completed since the last call.
  std::vector<std::pair<std::string, std::string>> TakeManifests();

 private:
  absl::Status CollectGarbage(const v1::Job& job, std::vector<v1::Event>* events);
  absl::Status CheckShard(const v1::Run& run, const v1::ReportCheckpointRequest& req) const;

  Store& store_;
  const Clock& clock_;
  const std::string root_;
  std::vector<std::string> deletions_;
  std::vector<std::pair<std::string, std::string>> manifests_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_CHECKPOINT_TRACKER_H_
