#include "worker/ckpt/checkpoint_shards.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "worker/ckpt/shard_file.h"

namespace dhp::ckpt {

absl::StatusOr<v1::Checkpoint> ReadManifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        path,
        " is missing: the controller writes it once every rank has reported its shard; "
        "export a COMPLETE checkpoint (dhpctl checkpoints JOB)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  v1::Checkpoint c;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;  // a newer controller's manifest
  if (!google::protobuf::util::JsonStringToMessage(text.str(), &c, o).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a checkpoint manifest (JSON)"));
  }
  if (c.state() != v1::CHECKPOINT_STATE_COMPLETE && c.state() != v1::CHECKPOINT_STATE_UNSPECIFIED) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": the checkpoint is ", v1::CheckpointState_Name(c.state()), ", not COMPLETE",
        c.reason().empty() ? "" : absl::StrCat(" (", c.reason(), ")")));
  }
  return c;
}

v1::CheckpointShard ShardRecord(int rank, const ShardInfo& info) {
  v1::CheckpointShard s;
  s.set_rank(rank);
  s.set_file(info.file);
  s.set_size_bytes(info.size_bytes);
  s.set_crc32c(info.crc32c);
  return s;
}

absl::StatusOr<std::unique_ptr<CheckpointShards>> CheckpointShards::Open(
    const v1::Checkpoint& record, const std::vector<int>& ranks) {
  std::unique_ptr<CheckpointShards> out(new CheckpointShards());
  out->dir_ = record.path();
  const std::set<int> wanted(ranks.begin(), ranks.end());
  std::set<int> listed;
  for (const v1::CheckpointShard& s : record.shards()) {
    if (!listed.insert(s.rank()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", record.id(), " (", record.path(), ") lists rank ", s.rank(),
                       " twice"));
    }
    if (!wanted.empty() && wanted.count(s.rank()) == 0) continue;
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
        OpenShard(record.path(), ShardInfo{s.file(), s.size_bytes(), s.crc32c()});
    if (!f.ok()) return f.status();
    absl::StatusOr<RankStateMeta> meta = RankStateMeta::FromMetadata((*f)->metadata(), (*f)->path());
    if (!meta.ok()) return meta.status();
    if (absl::Status st = meta->CheckWorldRank(s.rank(), (*f)->path()); !st.ok()) return st;
    out->metas_[s.rank()] = *std::move(meta);
    out->files_[s.rank()] = std::move(*f);
  }
  for (int r : wanted) {
    if (listed.count(r) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", record.id(), " (",
                                                     record.path(), ") lists no shard of rank ",
                                                     r));
    }
  }
  if (out->files_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", record.id(), " (", record.path(), ") lists no shard"));
  }
  // Every shard is of the same step, layout and job.
  for (const auto& [rank, meta] : out->metas_) {
    absl::Status s =
        meta.CheckSameCheckpoint(out->File(rank).path(), out->First(), out->FirstPath());
    if (!s.ok()) return s;
  }
  return out;
}

std::vector<int> CheckpointShards::ranks() const {
  std::vector<int> out;
  for (const auto& [rank, f] : files_) out.push_back(rank);
  return out;
}

absl::StatusOr<ShardTensor> CheckpointShards::Find(int rank, const std::string& name) const {
  const SafetensorsFile& f = File(rank);
  auto it = f.tensors().find(name);
  if (it == f.tensors().end()) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), " has no tensor ", name));
  }
  return ShardTensor{&f, &it->second};
}

}  // namespace dhp::ckpt
