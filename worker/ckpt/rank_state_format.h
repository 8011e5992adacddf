// The metadata of a rank's checkpoint shard ("dhp rank state"), defined once: dhp-rank writes
// it next to DistTrainer::State() in <checkpoint dir>/rank-<%05d world rank>.safetensors
// (worker/rank/job_rank.h), reads it back when it resumes, and `dhp-ckpt export`
// (worker/rank/ckpt_export.h) reads it to re-assemble the checkpoint. Plain C++ (no LibTorch).
//
// Keys and values (all strings, safetensors "__metadata__"):
//   dhp.format       "dhp-rank-state/1" (kRankStateFormat)
//   dhp.job_id       the job's id
//   dhp.attempt      the attempt (run) that wrote the shard, decimal
//   dhp.step         the steps done when it was written, decimal
//   dhp.world_size   the layout's world size, decimal
//   dhp.world_rank   the rank whose state the shard holds, decimal
//   dhp.layout       comm::Layout::DebugString() of the job's layout
//   dhp.data.epoch   the DataLoader position after the step (DataPosition), decimal
//   dhp.data.offset
//   dhp.spec         the normalised job spec as JSON, a few KB: what makes a checkpoint readable
//                    without the controller. Absent in shards of a dhp-rank older than
//                    `dhp-ckpt export` (read back as an empty spec_json).
// The checkpoint's manifest.json (the controller's v1::Checkpoint record, built from the ranks'
// ReportCheckpoint) describes the same checkpoint: its job_id, step and world_size are those of
// the shards, and it lists one shard per world rank.
//
// Thread-safety: plain values and pure functions.
#ifndef DHP_WORKER_CKPT_RANK_STATE_FORMAT_H_
#define DHP_WORKER_CKPT_RANK_STATE_FORMAT_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dhp::ckpt {

// dhp.format of a rank's checkpoint shard.
inline constexpr char kRankStateFormat[] = "dhp-rank-state/1";

// The metadata keys, for messages that name one. Only rank_state_format.cc spells them; read and
// write the metadata through RankStateMeta.
namespace rank_state_key {
extern const char kFormat[];      // "dhp.format"
extern const char kJobId[];       // "dhp.job_id"
extern const char kAttempt[];     // "dhp.attempt"
extern const char kStep[];        // "dhp.step"
extern const char kWorldSize[];   // "dhp.world_size"
extern const char kWorldRank[];   // "dhp.world_rank"
extern const char kLayout[];      // "dhp.layout"
extern const char kDataEpoch[];   // "dhp.data.epoch"
extern const char kDataOffset[];  // "dhp.data.offset"
extern const char kSpec[];        // "dhp.spec"
// Only in a full-parameter export (RankStateMeta::ExportMetadata): the model's preset name.
extern const char kModel[];       // "dhp.model"
}  // namespace rank_state_key

// One shard's metadata, parsed.
struct RankStateMeta {
  std::string job_id;
  int attempt = 0;
  int64_t step = 0;
  int world_size = 0;
  int world_rank = 0;
  std::string layout;  // comm::Layout::DebugString()
  int64_t data_epoch = 0;
  int64_t data_offset = 0;
  std::string spec_json;  // empty: not recorded (dhp.spec is then left out)

  // Every key above, with dhp.format = kRankStateFormat.
  std::map<std::string, std::string> ToMetadata() const;

  // Parses a shard's metadata: every key but dhp.spec is required. `where` (the file, usually)
  // starts every error, which names the key and, where there is one, the value: INVALID_ARGUMENT
  //   <where> is not a dhp rank state: metadata dhp.format is "x", expected "dhp-rank-state/1"
  //   <where>: metadata dhp.step is missing
  //   <where>: metadata dhp.step "abc" is not an integer
  // Keys it does not know are ignored.
  static absl::StatusOr<RankStateMeta> FromMetadata(
      const std::map<std::string, std::string>& metadata, const std::string& where);

  // INVALID_ARGUMENT "<where> is not world rank <rank>'s dhp rank state: metadata dhp.world_rank
  // is <world_rank>" unless this is `rank`'s state.
  absl::Status CheckWorldRank(int rank, const std::string& where) const;

  // Whether `other` (read from `other_where`) is a shard of the same checkpoint: the same step,
  // layout and job. INVALID_ARGUMENT otherwise: <where> has dhp.step "2", <other_where> "3"
  absl::Status CheckSameCheckpoint(const std::string& where, const RankStateMeta& other,
                                   const std::string& other_where) const;

  // The dhp.* metadata of a full-parameter export of this checkpoint (ckpt_export.h): dhp.job_id,
  // dhp.step and dhp.layout as here, and dhp.model = `model`.
  std::map<std::string, std::string> ExportMetadata(const std::string& model) const;
};

}  // namespace dhp::ckpt

#endif  // DHP_WORKER_CKPT_RANK_STATE_FORMAT_H_
