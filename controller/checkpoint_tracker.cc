#include "controller/checkpoint_tracker.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/path_inside.h"
#include "common/proto_enum.h"
#include "common/proto_yaml.h"
#include "controller/job_events.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

std::string Mib(int64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

bool SafeFileName(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos;
}

// Puts `shard` into `ckpt` (replacing the rank's earlier one), ranks ascending, and sums sizes.
void AddShard(v1::Checkpoint& ckpt, const v1::CheckpointShard& shard, double write_seconds) {
  auto* shards = ckpt.mutable_shards();
  shards->erase(std::remove_if(shards->begin(), shards->end(),
                               [&](const v1::CheckpointShard& s) {
                                 return s.rank() == shard.rank();
                               }),
                shards->end());
  *ckpt.add_shards() = shard;
  std::sort(shards->begin(), shards->end(),
            [](const auto& a, const auto& b) { return a.rank() < b.rank(); });
  int64_t size = 0;
  for (const v1::CheckpointShard& s : ckpt.shards()) size += s.size_bytes();
  ckpt.set_size_bytes(size);
  ckpt.set_write_seconds(std::max(ckpt.write_seconds(), write_seconds));
}

}  // namespace

CheckpointTracker::CheckpointTracker(Store& store, const Clock& clock, std::string root)
    : store_(store), clock_(clock), root_(std::move(root)) {}

std::string CheckpointTracker::RunDirectory(const v1::Job& job, int attempt) const {
  const std::string& dir = job.spec().checkpoint().directory();
  const std::string base = !dir.empty() && dir[0] == '/' ? dir : absl::StrCat(root_, "/", dir);
  return absl::StrCat(base, "/", job.id(), "/attempt-", attempt);
}

absl::Status CheckpointTracker::CheckShard(const v1::Run& run,
                                           const v1::ReportCheckpointRequest& req) const {
  const v1::CheckpointShard& shard = req.shard();
  if (req.step() < 1 || req.step() > kMaxReportedStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", req.step(), " must be in 1..", kMaxReportedStep));
  }
  if (shard.size_bytes() < 0 || shard.size_bytes() > kMaxReportedStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard.size_bytes: ", shard.size_bytes(), " must be in 0..", kMaxReportedStep));
  }
  if (req.world_size() != run.world_size() || run.world_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("world_size: ", req.world_size(),
                                                   " is not the run's (", run.world_size(), ")"));
  }
  if (shard.rank() < 0 || shard.rank() >= run.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard.rank: ", shard.rank(), " is out of range"));
  }
  if (!SafeFileName(shard.file())) {
    return absl::InvalidArgumentError("shard.file: \"" + shard.file() +
                                      "\" must be a plain file name");
  }
  // Resolved, links followed: a link inside the run's directory pointing out does not pass.
  if (req.path().empty() || !PathInside(req.path(), run.checkpoint_dir()) ||
      PathInside(run.checkpoint_dir(), req.path())) {  // the directory itself
    return absl::InvalidArgumentError("path: \"" + req.path() + "\" is not inside the run's " +
                                      "checkpoint directory " + run.checkpoint_dir());
  }
  return absl::OkStatus();
}

absl::Status CheckpointTracker::OnShard(const v1::Job& job, const v1::Run& run,
                                        const v1::ReportCheckpointRequest& req,
                                        v1::ReportCheckpointResponse* resp,
                                        std::vector<v1::Event>* events) {
  if (absl::Status s = CheckShard(run, req); !s.ok()) return s;
  v1::Checkpoint ckpt;
  for (const v1::Checkpoint& c : store_.ListCheckpoints(job.id())) {
    if (c.attempt() == run.attempt() && c.step() == req.step()) ckpt = c;
  }
  if (ckpt.id() == 0) {
    ckpt.set_job_id(job.id());
    ckpt.set_attempt(run.attempt());
    ckpt.set_step(req.step());
    ckpt.set_path(req.path());
    ckpt.set_state(v1::CHECKPOINT_STATE_PARTIAL);
    ckpt.set_world_size(req.world_size());
    *ckpt.mutable_create_time() = MicrosToTimestamp(clock_.NowMicros());
    absl::StatusOr<v1::Checkpoint> added = store_.AddCheckpoint(ckpt, {});
    if (!added.ok()) return added.status();
    ckpt = *added;
  }
  if (ckpt.state() != v1::CHECKPOINT_STATE_PARTIAL) {
    *resp->mutable_checkpoint() = ckpt;  // a retried report of a finished checkpoint
    return absl::OkStatus();
  }
  AddShard(ckpt, req.shard(), req.write_seconds());
  std::vector<v1::Event> ckpt_events;
  if (ckpt.shards_size() == ckpt.world_size()) {
    ckpt.set_state(v1::CHECKPOINT_STATE_COMPLETE);
    ckpt_events.push_back(JobEvent(
        job, clock_.NowMicros(), "checkpoint", "PARTIAL", "COMPLETE",
        absl::StrFormat("checkpoint %d at step %d: %d shards, %s, written in %.2f s, in %s",
                        ckpt.id(), ckpt.step(), ckpt.shards_size(), Mib(ckpt.size_bytes()),
                        ckpt.write_seconds(), ckpt.path())));
  }
  absl::StatusOr<std::vector<v1::Event>> added = store_.UpdateCheckpoint(ckpt, ckpt_events);
  if (!added.ok()) return added.status();
  events->insert(events->end(), added->begin(), added->end());
  *resp->mutable_checkpoint() = ckpt;
  if (ckpt.state() != v1::CHECKPOINT_STATE_COMPLETE) return absl::OkStatus();
  manifests_.emplace_back(ckpt.path(), ProtoToJson(ckpt, /*pretty=*/true));
  return CollectGarbage(job, events);
}

absl::Status CheckpointTracker::CollectGarbage(const v1::Job& job,
                                               std::vector<v1::Event>* events) {
  const std::vector<v1::Checkpoint> all = store_.ListCheckpoints(job.id());
  std::vector<const v1::Checkpoint*> complete;
  for (const v1::Checkpoint& c : all) {
    if (c.state() == v1::CHECKPOINT_STATE_COMPLETE) complete.push_back(&c);
  }
  if (complete.empty()) return absl::OkStatus();
  const int keep = std::max(1, job.spec().checkpoint().keep_latest());
  const int64_t newest = complete.back()->step();
  std::set<int64_t> kept;
  for (size_t i = complete.size() > static_cast<size_t>(keep) ? complete.size() - keep : 0;
       i < complete.size(); ++i) {
    kept.insert(complete[i]->id());
  }
  for (const v1::Checkpoint& c : all) {
    std::string why;
    if (c.state() == v1::CHECKPOINT_STATE_COMPLETE && kept.count(c.id()) == 0) {
      why = absl::StrCat("older than the ", keep, " newest complete checkpoints ",
                         "(checkpoint.keep_latest ", keep, ")");
    } else if (c.state() != v1::CHECKPOINT_STATE_COMPLETE && c.step() <= newest) {
      why = absl::StrCat("superseded by the complete checkpoint at step ", newest);
    }
    if (why.empty()) continue;
    v1::Event e = JobEvent(job, clock_.NowMicros(), "checkpoint", ShortName(c.state()), "DELETED",
                           absl::StrCat("checkpoint ", c.id(), " at step ", c.step(), ": ", why));
    absl::StatusOr<std::vector<v1::Event>> added = store_.DeleteCheckpoint(c.id(), {e});
    if (!added.ok()) return added.status();
    events->insert(events->end(), added->begin(), added->end());
    if (c.path().rfind(root_ + "/", 0) == 0 && c.path().find("..") == std::string::npos) {
      deletions_.push_back(c.path());
    } else {
      DHP_LOG(WARNING) << "not deleting " << c.path() << ": outside the checkpoint root";
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointTracker::Reject(const v1::Job& job,
                                                      const v1::RejectCheckpointRequest& req,
                                                      std::vector<v1::Event>* events) {
  v1::Checkpoint ckpt;
  for (const v1::Checkpoint& c : store_.ListCheckpoints(job.id())) {
    if (c.id() == req.checkpoint_id()) ckpt = c;
  }
  if (ckpt.id() == 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", req.checkpoint_id(), " of job ",
                                            job.id(), " not found"));
  }
  const std::string why = absl::StrCat("checkpoint ", ckpt.id(), " at step ", ckpt.step(),
                                       " is unusable: rank ", req.rank(), ": ", req.reason());
  if (ckpt.state() == v1::CHECKPOINT_STATE_CORRUPT) return why;
  v1::Event e = JobEvent(job, clock_.NowMicros(), "checkpoint", ShortName(ckpt.state()),
                         "CORRUPT", absl::StrCat(why, "; it is skipped"));
  ckpt.set_state(v1::CHECKPOINT_STATE_CORRUPT);
  ckpt.set_reason(absl::StrCat("rank ", req.rank(), ": ", req.reason()));
  absl::StatusOr<std::vector<v1::Event>> added = store_.UpdateCheckpoint(ckpt, {e});
  if (!added.ok()) return added.status();
  events->insert(events->end(), added->begin(), added->end());
  return why;
}

std::optional<v1::Checkpoint> CheckpointTracker::ResumePoint(const std::string& job_id) const {
  std::optional<v1::Checkpoint> newest;
  for (v1::Checkpoint& c : store_.ListCheckpoints(job_id)) {
    if (c.state() == v1::CHECKPOINT_STATE_COMPLETE) newest = std::move(c);
  }
  return newest;
}

std::vector<std::pair<std::string, std::string>> CheckpointTracker::TakeManifests() {
  std::vector<std::pair<std::string, std::string>> out;
  out.swap(manifests_);
  return out;
}

std::vector<std::string> CheckpointTracker::TakeDeletions() {
  std::vector<std::string> out;
  out.swap(deletions_);
  return out;
}

}  // namespace dhp::controller
