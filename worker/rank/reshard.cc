#include "worker/rank/reshard.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_layout.h"
#include "common/status_macros.h"
#include "dhp/v1/job_spec.pb.h"
#include "google/protobuf/util/json_util.h"
#include "worker/model/safetensors.h"
#include "worker/model/torch_status.h"
#include "worker/parallel/text_tp_layout.h"

namespace dhp {
namespace {

constexpr char kVisionOptim[] = "optim.vision.";
constexpr char kTextOptim[] = "optim.text.";
constexpr char kTrainerStep[] = "trainer.step";

bool VisionIsTp(const comm::Layout& l) {
  return l.vision_parallelism == comm::VisionParallelism::kTensor && l.vision_degree > 1;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// World ranks of the ZeRO-1 group of vision inner rank `inner` under `l`, in group-rank order
// (vision_stage_ulysses.cc: the whole vision group; vision_stage_tp.cc: its vision-DP group).
std::vector<int> ZeroGroup(const comm::Layout& l, int inner) {
  std::vector<int> ranks;
  for (int d = 0; d < l.dp; ++d) {
    if (VisionIsTp(l)) {
      ranks.push_back(comm::VisionWorldRank(l, d, inner));
    } else {
      for (int i = 0; i < l.vision_degree; ++i) ranks.push_back(comm::VisionWorldRank(l, d, i));
    }
  }
  return ranks;
}

}  // namespace

absl::StatusOr<comm::Layout> CheckpointLayout(const v1::Checkpoint& record) {
  const v1::CheckpointShard* first = nullptr;
  for (const v1::CheckpointShard& s : record.shards()) {
    if (s.rank() == 0) first = &s;
  }
  if (first == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", record.id(), " (",
                                                   record.path(), ") lists no shard of rank 0"));
  }
  DHP_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                       SafetensorsFile::Open(record.path() + "/" + first->file()));
  DHP_ASSIGN_OR_RETURN(ckpt::RankStateMeta meta,
                       ckpt::RankStateMeta::FromMetadata(file->metadata(), file->path()));
  if (meta.spec_json.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        file->path(), " has no ", ckpt::rank_state_key::kSpec,
        " metadata (written by an older dhp-rank): it resumes only under its own layout \"",
        meta.layout, "\""));
  }
  v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(meta.spec_json, &spec, o).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file->path(), ": metadata ", ckpt::rank_state_key::kSpec, " is not JSON"));
  }
  const comm::Layout layout = LayoutForSpec(spec);
  if (layout.DebugString() != meta.layout) {
    return absl::InvalidArgumentError(absl::StrCat(
        file->path(), ": metadata ", ckpt::rank_state_key::kLayout, " \"", meta.layout,
        "\" is not the layout of its ", ckpt::rank_state_key::kSpec, " (\"",
        layout.DebugString(), "\")"));
  }
  return layout;
}

class ReshardedState::Impl {
 public:
  comm::Layout from, to;
  std::optional<comm::StageCoord> vision, text;  // the new rank's roles
  std::map<std::string, tp::ParamShard> old_text, new_text;
  int64_t flat = 0;                      // F
  int64_t old_part = 0, new_part = 0;    // P, P'
  int64_t lo = 0, hi = 0;                // the new partition's range of the flat buffer
  std::vector<int> old_zero;             // the old ZeRO group whose buffer it is
  std::unique_ptr<ckpt::CheckpointShards> shards;

  // Computes everything above but `shards` and returns the old ranks to open.
  std::vector<int> Plan(int64_t vision_flat_numel);
  absl::StatusOr<at::Tensor> Make(const std::string& name) const;
  // ReshardedState::State.
  absl::Status Fill(const NamedTensors& live, NamedTensors* out) const;

 private:
  int OldVisionRank() const {
    return comm::VisionWorldRank(from, 0, VisionIsTp(from) ? vision->inner_rank : 0);
  }
  int OldText0() const { return comm::TextWorldRank(from, 0, 0); }
  absl::StatusOr<at::Tensor> Whole(int rank, const std::string& name) const;
  absl::StatusOr<at::Tensor> ZeroPartition(const std::string& name) const;
  // `name` is parameter `param` or its optimizer state (its shape).
  absl::StatusOr<at::Tensor> TextTensor(const std::string& name, const std::string& param) const;
  absl::StatusOr<at::Tensor> TextPieces(const std::string& name, const tp::ParamShard& old,
                                        int64_t start, int64_t length) const;
};

std::vector<int> ReshardedState::Impl::Plan(int64_t vision_flat_numel) {
  std::set<int> ranks;
  if (vision.has_value()) {
    ranks.insert(OldVisionRank());
    flat = vision_flat_numel;
    old_zero = ZeroGroup(from, vision->inner_rank);
    const int new_n = VisionIsTp(to) ? to.dp : to.VisionSize();
    const int new_r = VisionIsTp(to) ? vision->replica : vision->group_rank;
    old_part = CeilDiv(flat, static_cast<int64_t>(old_zero.size()));
    new_part = CeilDiv(flat, new_n);
    lo = std::min(flat, new_r * new_part);
    hi = std::min(flat, lo + new_part);
    for (int64_t g = lo / std::max<int64_t>(old_part, 1); g * old_part < hi; ++g) {
      ranks.insert(old_zero[g]);
    }
  }
  if (text.has_value()) {
    ranks.insert(OldText0());
    for (const auto& [param, shard] : new_text) {
      auto o = old_text.find(param);
      if (o == old_text.end() || from.text_degree == 1) continue;
      const tp::ShardRange want = to.text_degree > 1 ? shard.ranges[text->inner_rank]
                                                     : tp::ShardRange{0, shard.full_size};
      for (int i = 0; i < from.text_degree; ++i) {
        const tp::ShardRange& r = o->second.ranges[i];
        if (o->second.IsFirstHolder(i) && r.start < want.end() && want.start < r.end()) {
          ranks.insert(comm::TextWorldRank(from, 0, i));
        }
      }
    }
  }
  return {ranks.begin(), ranks.end()};
}

absl::StatusOr<at::Tensor> ReshardedState::Impl::Whole(int rank, const std::string& name) const {
  DHP_ASSIGN_OR_RETURN(ckpt::ShardTensor t, shards->Find(rank, name));
  return ReadTensor(*t.file, *t.info);
}

absl::StatusOr<at::Tensor> ReshardedState::Impl::ZeroPartition(const std::string& name) const {
  at::Tensor out;
  for (int64_t g = lo / std::max<int64_t>(old_part, 1); g * old_part < hi; ++g) {
    DHP_ASSIGN_OR_RETURN(ckpt::ShardTensor t, shards->Find(old_zero[g], name));
    if (t.info->shape != std::vector<int64_t>{old_part}) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.file->path(), ": ", name, " is ", ShapeText(t.info->shape), "; a ZeRO-1 partition of ",
          flat, " vision elements over ", old_zero.size(), " ranks is [", old_part,
          "] (another model?)"));
    }
    const int64_t a = std::max(lo, g * old_part), b = std::min(hi, (g + 1) * old_part);
    at::Tensor piece = ReadTensorSlice(*t.file, *t.info, 0, a - g * old_part, b - a);
    if (!out.defined()) out = at::zeros({new_part}, piece.options());  // padding stays zero
    out.narrow(0, a - lo, b - a).copy_(piece);
  }
  if (!out.defined()) {  // a partition wholly in the padding
    DHP_ASSIGN_OR_RETURN(ckpt::ShardTensor t, shards->Find(OldVisionRank(), name));
    at::ScalarType type = at::kFloat;
    StDtypeToScalarType(t.info->dtype, &type);
    out = at::zeros({new_part}, at::TensorOptions().dtype(type));
  }
  return out;
}

absl::StatusOr<at::Tensor> ReshardedState::Impl::TextPieces(const std::string& name,
                                                            const tp::ParamShard& old,
                                                            int64_t start, int64_t length) const {
  std::vector<at::Tensor> parts;
  int64_t covered = 0;
  for (int i = 0; i < from.text_degree; ++i) {
    const tp::ShardRange& r = old.ranges[i];
    const int64_t a = std::max(start, r.start), b = std::min(start + length, r.end());
    if (!old.IsFirstHolder(i) || a >= b) continue;
    DHP_ASSIGN_OR_RETURN(ckpt::ShardTensor t,
                         shards->Find(comm::TextWorldRank(from, 0, i), name));
    if (static_cast<int>(t.info->shape.size()) <= old.dim ||
        t.info->shape[old.dim] != r.length) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.file->path(), ": ", name, " is ", ShapeText(t.info->shape), "; text TP rank ", i,
          " of ", from.text_degree, " holds ", r.length, " along dim ", old.dim));
    }
    parts.push_back(ReadTensorSlice(*t.file, *t.info, old.dim, a - r.start, b - a));
    covered += b - a;
  }
  if (covered != length) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the old text TP shards cover ",
                                                   covered, " of ", length, " entries"));
  }
  return parts.size() == 1 ? parts.front() : at::cat(parts, old.dim);
}

absl::StatusOr<at::Tensor> ReshardedState::Impl::TextTensor(const std::string& name,
                                                            const std::string& param) const {
  auto o = old_text.find(param);
  auto n = new_text.find(param);
  const bool old_split = from.text_degree > 1 && o != old_text.end();
  const bool new_split = to.text_degree > 1 && n != new_text.end();
  if (!old_split) {
    DHP_ASSIGN_OR_RETURN(ckpt::ShardTensor t, shards->Find(OldText0(), name));
    if (!new_split) return ReadTensor(*t.file, *t.info);
    const tp::ShardRange& r = n->second.ranges[text->inner_rank];
    const int dim = n->second.dim;
    if (static_cast<int>(t.info->shape.size()) <= dim || t.info->shape[dim] < r.end()) {
      return absl::InvalidArgumentError(absl::StrCat(t.file->path(), ": ", name, " is ",
                                                     ShapeText(t.info->shape), ", not [",
                                                     n->second.full_size, "] along dim ", dim));
    }
    return ReadTensorSlice(*t.file, *t.info, dim, r.start, r.length);
  }
  if (!new_split) return TextPieces(name, o->second, 0, o->second.full_size);
  if (n->second.dim != o->second.dim) {
    return absl::InvalidArgumentError(absl::StrCat(param, " is split along dim ", o->second.dim,
                                                   " in the checkpoint, ", n->second.dim,
                                                   " now"));
  }
  const tp::ShardRange& r = n->second.ranges[text->inner_rank];
  return TextPieces(name, o->second, r.start, r.length);
}

absl::StatusOr<at::Tensor> ReshardedState::Impl::Make(const std::string& name) const {
  if (name == kTrainerStep) return Whole(shards->ranks().front(), name);
  if (vision.has_value() && absl::StartsWith(name, "visual.")) return Whole(OldVisionRank(), name);
  if (vision.has_value() && absl::StartsWith(name, kVisionOptim)) {
    if (name == absl::StrCat(kVisionOptim, "step")) return Whole(OldVisionRank(), name);
    return ZeroPartition(name);
  }
  if (text.has_value() && absl::StartsWith(name, kTextOptim)) {
    const size_t dot = name.rfind('.');
    const std::string param = name.substr(sizeof(kTextOptim) - 1, dot - (sizeof(kTextOptim) - 1));
    if (name.substr(dot + 1) == "step") return Whole(OldText0(), name);
    return TextTensor(name, param);
  }
  if (text.has_value() && (absl::StartsWith(name, "model.") || absl::StartsWith(name, "lm_head."))) {
    return TextTensor(name, name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": no tensor of that name is resharded for this rank"));
}

ReshardedState::ReshardedState(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ReshardedState::~ReshardedState() = default;

const comm::Layout& ReshardedState::from() const { return impl_->from; }
const ckpt::RankStateMeta& ReshardedState::meta() const { return impl_->shards->First(); }

absl::StatusOr<std::unique_ptr<ReshardedState>> ReshardedState::Open(
    const v1::Checkpoint& record, const ModelPreset& preset, const comm::Layout& to,
    int world_rank, int64_t vision_flat_numel) {
  auto impl = std::make_unique<Impl>();
  DHP_ASSIGN_OR_RETURN(impl->from, CheckpointLayout(record));
  DHP_RETURN_IF_ERROR(comm::CheckReshardable(impl->from, to));
  impl->to = to;
  impl->vision = comm::VisionCoord(to, world_rank);
  impl->text = comm::TextCoord(to, world_rank);
  DHP_ASSIGN_OR_RETURN(impl->old_text, tp::TextTpShardLayout(preset.text, impl->from.text_degree));
  DHP_ASSIGN_OR_RETURN(impl->new_text, tp::TextTpShardLayout(preset.text, to.text_degree));
  const std::vector<int> ranks = impl->Plan(vision_flat_numel);
  DHP_ASSIGN_OR_RETURN(impl->shards, ckpt::CheckpointShards::Open(record, ranks));
  if (impl->shards->First().layout != impl->from.DebugString()) {
    return absl::InvalidArgumentError(absl::StrCat(impl->shards->FirstPath(), " has layout \"",
                                                   impl->shards->First().layout, "\", rank 0 \"",
                                                   impl->from.DebugString(), "\""));
  }
  return std::unique_ptr<ReshardedState>(new ReshardedState(std::move(impl)));
}

absl::Status ReshardedState::Impl::Fill(const NamedTensors& live, NamedTensors* out) const {
  std::set<std::string> made;
  for (const auto& [name, like] : live) {
    DHP_ASSIGN_OR_RETURN(at::Tensor t, Make(name));
    if (t.sizes() != like.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the checkpoint gives ",
                                                     ShapeText(t.sizes().vec()),
                                                     ", this rank holds ",
                                                     ShapeText(like.sizes().vec())));
    }
    out->emplace_back(name, std::move(t));
    made.insert(name);
  }
  if (!text.has_value()) return absl::OkStatus();
  // Text optimizer state: a freshly built trainer has none yet; the old text ranks name it.
  for (const auto& [name, info] : shards->File(OldText0()).tensors()) {
    if (!absl::StartsWith(name, kTextOptim) || made.count(name) > 0) continue;
    DHP_ASSIGN_OR_RETURN(at::Tensor t, Make(name));
    out->emplace_back(name, std::move(t));
  }
  return absl::OkStatus();
}

absl::StatusOr<NamedTensors> ReshardedState::State(const NamedTensors& live) const {
  NamedTensors out;
  absl::Status filled;
  absl::Status caught =
      CatchTorch("resharding the checkpoint", [&] { filled = impl_->Fill(live, &out); });
  if (!caught.ok()) return caught;
  if (!filled.ok()) return filled;
  return out;
}

}  // namespace dhp
