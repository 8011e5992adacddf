#include "worker/ckpt/rank_state_format.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dhp::ckpt {

namespace rank_state_key {
const char kFormat[] = "dhp.format";
const char kJobId[] = "dhp.job_id";
const char kAttempt[] = "dhp.attempt";
const char kStep[] = "dhp.step";
const char kWorldSize[] = "dhp.world_size";
const char kWorldRank[] = "dhp.world_rank";
const char kLayout[] = "dhp.layout";
const char kDataEpoch[] = "dhp.data.epoch";
const char kDataOffset[] = "dhp.data.offset";
const char kSpec[] = "dhp.spec";
const char kModel[] = "dhp.model";
}  // namespace rank_state_key

namespace key = rank_state_key;

namespace {

// Reads the keys of one shard's metadata; the first error sticks.
class MetaReader {
 public:
  MetaReader(const std::map<std::string, std::string>& metadata, const std::string& where)
      : metadata_(metadata), where_(where) {}

  const absl::Status& status() const { return status_; }

  void String(const char* k, std::string* out) {
    if (const std::string* v = Find(k)) *out = *v;
  }

  template <typename Int>
  void Integer(const char* k, Int* out) {
    const std::string* v = Find(k);
    if (v != nullptr && !absl::SimpleAtoi(*v, out)) {
      Fail(absl::StrCat(where_, ": metadata ", k, " \"", *v, "\" is not an integer"));
    }
  }

 private:
  const std::string* Find(const char* k) {
    if (!status_.ok()) return nullptr;
    auto it = metadata_.find(k);
    if (it == metadata_.end()) {
      Fail(absl::StrCat(where_, ": metadata ", k, " is missing"));
      return nullptr;
    }
    return &it->second;
  }

  void Fail(const std::string& message) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(message);
  }

  const std::map<std::string, std::string>& metadata_;
  const std::string& where_;
  absl::Status status_;
};

}  // namespace

std::map<std::string, std::string> RankStateMeta::ToMetadata() const {
  std::map<std::string, std::string> m = {
      {key::kFormat, kRankStateFormat},
      {key::kJobId, job_id},
      {key::kAttempt, std::to_string(attempt)},
      {key::kStep, std::to_string(step)},
      {key::kWorldSize, std::to_string(world_size)},
      {key::kWorldRank, std::to_string(world_rank)},
      {key::kLayout, layout},
      {key::kDataEpoch, std::to_string(data_epoch)},
      {key::kDataOffset, std::to_string(data_offset)},
  };
  if (!spec_json.empty()) m[key::kSpec] = spec_json;
  return m;
}

absl::StatusOr<RankStateMeta> RankStateMeta::FromMetadata(
    const std::map<std::string, std::string>& metadata, const std::string& where) {
  auto format = metadata.find(key::kFormat);
  if (format == metadata.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is not a dhp rank state: metadata ", key::kFormat, " is missing"));
  }
  if (format->second != kRankStateFormat) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not a dhp rank state: metadata ",
                                                   key::kFormat, " is \"", format->second,
                                                   "\", expected \"", kRankStateFormat, "\""));
  }
  RankStateMeta m;
  MetaReader r(metadata, where);
  r.String(key::kJobId, &m.job_id);
  r.Integer(key::kAttempt, &m.attempt);
  r.Integer(key::kStep, &m.step);
  r.Integer(key::kWorldSize, &m.world_size);
  r.Integer(key::kWorldRank, &m.world_rank);
  r.String(key::kLayout, &m.layout);
  r.Integer(key::kDataEpoch, &m.data_epoch);
  r.Integer(key::kDataOffset, &m.data_offset);
  if (!r.status().ok()) return r.status();
  auto spec = metadata.find(key::kSpec);  // optional: older shards lack it
  if (spec != metadata.end()) m.spec_json = spec->second;
  return m;
}

absl::Status RankStateMeta::CheckWorldRank(int rank, const std::string& where) const {
  if (world_rank == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, " is not world rank ", rank,
                                                 "'s dhp rank state: metadata ", key::kWorldRank,
                                                 " is ", world_rank));
}

absl::Status RankStateMeta::CheckSameCheckpoint(const std::string& where,
                                                const RankStateMeta& other,
                                                const std::string& other_where) const {
  const auto differ = [&](const char* k, const std::string& mine, const std::string& theirs) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " has ", k, " \"", mine, "\", ", other_where, " \"", theirs, "\""));
  };
  if (step != other.step) {
    return differ(key::kStep, std::to_string(step), std::to_string(other.step));
  }
  if (layout != other.layout) return differ(key::kLayout, layout, other.layout);
  if (job_id != other.job_id) return differ(key::kJobId, job_id, other.job_id);
  return absl::OkStatus();
}

std::map<std::string, std::string> RankStateMeta::ExportMetadata(const std::string& model) const {
  return {
      {key::kJobId, job_id},
      {key::kStep, std::to_string(step)},
      {key::kModel, model},
      {key::kLayout, layout},
  };
}

}  // namespace dhp::ckpt
