#include "worker/rank/ckpt_export.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_layout.h"
#include "common/layout.h"
#include "common/model_presets.h"
#include "common/spec_validate.h"
#include "dhp/v1/job.pb.h"
#include "worker/ckpt/checkpoint_shards.h"
#include "worker/ckpt/rank_state_format.h"
#include "worker/ckpt/shard_file.h"
#include "worker/model/param_count.h"
#include "worker/model/safetensors.h"
#include "worker/model/torch_status.h"
#include "worker/model/weights.h"
#include "worker/parallel/text_tp_layout.h"
#include "worker/parallel/vision_tp.h"
#include "worker/rank/model_init.h"

namespace dhp {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool IsParameter(const std::string& name) {
  // DistTrainer::State(): parameters keep their checkpoint names; the rest is "trainer.step"
  // and "optim.*".
  return absl::StartsWith(name, "visual.") || absl::StartsWith(name, "model.") ||
         absl::StartsWith(name, "lm_head.");
}

bool ToStDtype(at::ScalarType t, StDtype* out) {
  switch (t) {
    case at::kFloat:
      *out = StDtype::kF32;
      return true;
    case at::kHalf:
      *out = StDtype::kF16;
      return true;
    case at::kBFloat16:
      *out = StDtype::kBF16;
      return true;
    default:
      return false;
  }
}

bool IsFloating(StDtype d) {
  return d == StDtype::kF32 || d == StDtype::kF16 || d == StDtype::kBF16 || d == StDtype::kF64;
}

// One parameter of the output: where its pieces are and how they join.
using Piece = ckpt::ShardTensor;
struct Output {
  std::string name;
  std::vector<Piece> pieces;  // one: as stored; several: joined by `join`
  std::vector<int64_t> shape;
  StDtype stored;
  std::function<at::Tensor(const std::vector<at::Tensor>&)> join;
};

class Exporter final : public AssembledCheckpoint {
 public:
  explicit Exporter(const CheckpointExportOptions& options) : options_(options) {}

  // Opens and verifies the shards and fills the base class's members.
  absl::Status Plan();

 private:
  absl::Status OpenShards();
  absl::Status ResolveSpec();
  absl::Status PlanVision();
  absl::Status PlanText();
  absl::StatusOr<Piece> Find(int rank, const std::string& name) const {
    return shards_->Find(rank, name);
  }
  const SafetensorsFile& File(int rank) const { return shards_->File(rank); }
  std::vector<std::string> ParameterNames(int rank, const std::vector<std::string>& prefixes) const;

  absl::Status PlanTensors();

  const CheckpointExportOptions options_;
  std::unique_ptr<ckpt::CheckpointShards> shards_;
  comm::Layout layout_;
  std::vector<Output> outputs_;  // tensors_' producers point into it: never resized after Plan
};

absl::Status Exporter::OpenShards() {
  absl::StatusOr<v1::Checkpoint> manifest = ckpt::ReadManifest(options_.checkpoint_dir);
  if (!manifest.ok()) return manifest.status();
  manifest->set_path(options_.checkpoint_dir);  // where it is now, not where it was written
  absl::StatusOr<std::unique_ptr<ckpt::CheckpointShards>> shards =
      ckpt::CheckpointShards::Open(*manifest);
  if (!shards.ok()) return shards.status();
  shards_ = *std::move(shards);
  result_.job_id = shards_->First().job_id;
  result_.step = shards_->First().step;
  return absl::OkStatus();
}

absl::Status Exporter::ResolveSpec() {
  const std::string& first_path = shards_->FirstPath();
  const ckpt::RankStateMeta& first = shards_->First();
  const SpecOptions spec_options = RankSpecOptions(options_.data_root);
  if (options_.spec.has_value()) {
    spec_ = *options_.spec;
    if (absl::Status s = NormalizeAndValidateSpec(&spec_, spec_options); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("the given spec: ", s.message()));
    }
  } else {
    if (first.spec_json.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(first_path, " has no ", ckpt::rank_state_key::kSpec,
                       " metadata (written by an older dhp-rank): give the job's spec (dhp-ckpt "
                       "export --spec FILE)"));
    }
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(first.spec_json, spec_options);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(first_path, ": metadata ",
                                                     ckpt::rank_state_key::kSpec, ": ",
                                                     spec.status().message()));
    }
    spec_ = *std::move(spec);
  }
  absl::StatusOr<ModelPreset> preset = ResolveSpecModel(spec_, spec_options);
  if (!preset.ok()) return preset.status();
  model_ = *std::move(preset);
  layout_ = LayoutForSpec(spec_);
  result_.model = model_.name;
  result_.layout = layout_.DebugString();
  if (first.layout != layout_.DebugString()) {
    return absl::FailedPreconditionError(
        absl::StrCat(first_path, " was written by layout \"", first.layout,
                     "\"; the spec's layout is \"", layout_.DebugString(), "\""));
  }
  const std::vector<int> ranks = shards_->ranks();
  if (static_cast<int>(ranks.size()) != layout_.WorldSize() ||
      ranks.back() != layout_.WorldSize() - 1 || ranks.front() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.checkpoint_dir, "/manifest.json lists shards of ranks ",
                     absl::StrJoin(ranks, ", "), "; layout ", layout_.DebugString(),
                     " has ranks 0..", layout_.WorldSize() - 1));
  }
  return absl::OkStatus();
}

std::vector<std::string> Exporter::ParameterNames(int rank,
                                                  const std::vector<std::string>& prefixes) const {
  std::vector<std::string> out;
  for (const auto& [name, info] : File(rank).tensors()) {
    if (!IsParameter(name)) continue;
    for (const std::string& p : prefixes) {
      if (absl::StartsWith(name, p)) out.push_back(name);
    }
  }
  return out;
}

absl::Status Exporter::PlanVision() {
  const int sv = layout_.vision_degree;
  const bool tp = layout_.vision_parallelism == comm::VisionParallelism::kTensor && sv > 1;
  const int rank0 = comm::VisionWorldRank(layout_, 0, 0);
  for (const std::string& name : ParameterNames(rank0, {"visual."})) {
    absl::StatusOr<Piece> p0 = Find(rank0, name);
    if (!p0.ok()) return p0.status();
    Output out{name, {*p0}, p0->info->shape, p0->info->dtype, nullptr};
    const VisionTpShardKind kind = tp ? VisionTpShardOf(name) : VisionTpShardKind::kReplicated;
    if (kind != VisionTpShardKind::kReplicated) {
      for (int i = 1; i < sv; ++i) {
        absl::StatusOr<Piece> p = Find(comm::VisionWorldRank(layout_, 0, i), name);
        if (!p.ok()) return p.status();
        if (p->info->shape != p0->info->shape || p->info->dtype != p0->info->dtype) {
          return absl::InvalidArgumentError(absl::StrCat(
              name, ": vision TP shards ", ShapeText(p0->info->shape), " in ", p0->file->path(),
              " and ", ShapeText(p->info->shape), " in ", p->file->path(), " differ"));
        }
        out.pieces.push_back(*p);
      }
      const int dim = kind == VisionTpShardKind::kCols ? 1 : 0;
      if (static_cast<int>(out.shape.size()) <= dim) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": a vision TP shard of shape ",
                                                       ShapeText(out.shape), " has no dim ", dim));
      }
      out.shape[dim] *= sv;
      if (kind == VisionTpShardKind::kQkvRows) {
        // Each shard is [q_i; k_i; v_i]: join each third over the ranks.
        out.join = [](const std::vector<at::Tensor>& shards) {
          std::vector<at::Tensor> thirds;
          for (const at::Tensor& s : shards) {
            std::vector<int64_t> sizes = {3, s.size(0) / 3};
            for (int64_t d = 1; d < s.dim(); ++d) sizes.push_back(s.size(d));
            thirds.push_back(s.reshape(sizes));  // [3, rows_i, ...]
          }
          at::Tensor joined = at::cat(thirds, 1);  // [3, rows, ...]
          std::vector<int64_t> full = {joined.size(0) * joined.size(1)};
          for (int64_t d = 2; d < joined.dim(); ++d) full.push_back(joined.size(d));
          return joined.reshape(full);
        };
      } else {
        out.join = [dim](const std::vector<at::Tensor>& shards) { return at::cat(shards, dim); };
      }
    }
    outputs_.push_back(std::move(out));
  }
  return absl::OkStatus();
}

absl::Status Exporter::PlanText() {
  const int tt = layout_.text_degree;
  absl::StatusOr<std::map<std::string, tp::ParamShard>> shards =
      tp::TextTpShardLayout(model_.text, tt);
  if (!shards.ok()) return shards.status();
  const int rank0 = comm::TextWorldRank(layout_, 0, 0);
  for (const std::string& name : ParameterNames(rank0, {"model.", "lm_head."})) {
    absl::StatusOr<Piece> p0 = Find(rank0, name);
    if (!p0.ok()) return p0.status();
    Output out{name, {*p0}, p0->info->shape, p0->info->dtype, nullptr};
    auto it = shards->find(name);
    if (it != shards->end() && tt > 1) {
      const tp::ParamShard& shard = it->second;
      if (static_cast<int>(out.shape.size()) <= shard.dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": a text TP shard of shape ", ShapeText(out.shape), " has no dim ", shard.dim));
      }
      out.pieces.clear();
      out.shape[shard.dim] = 0;
      for (int r = 0; r < tt; ++r) {
        if (!shard.IsFirstHolder(r)) continue;  // a replicated KV head: one copy
        absl::StatusOr<Piece> p = Find(comm::TextWorldRank(layout_, 0, r), name);
        if (!p.ok()) return p.status();
        std::vector<int64_t> expected = p0->info->shape;
        expected[shard.dim] = shard.ranges[r].length;
        if (p->info->shape != expected || p->info->dtype != p0->info->dtype) {
          return absl::InvalidArgumentError(
              absl::StrCat(name, ": ", p->file->path(), " holds ", ShapeText(p->info->shape),
                           "; text TP rank ", r, " of ", tt, " should hold ", ShapeText(expected)));
        }
        out.pieces.push_back(*p);
        out.shape[shard.dim] += shard.ranges[r].length;
      }
      if (out.shape[shard.dim] != shard.full_size) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": the TP shards add up to ",
                                                       out.shape[shard.dim], " along dim ",
                                                       shard.dim, ", not ", shard.full_size));
      }
      const int dim = shard.dim;
      out.join = [dim](const std::vector<at::Tensor>& pieces) { return at::cat(pieces, dim); };
    }
    outputs_.push_back(std::move(out));
  }
  return absl::OkStatus();
}

absl::Status Exporter::Plan() {
  if (absl::Status s = OpenShards(); !s.ok()) return s;
  if (absl::Status s = ResolveSpec(); !s.ok()) return s;
  if (absl::Status s = PlanVision(); !s.ok()) return s;
  if (absl::Status s = PlanText(); !s.ok()) return s;
  return PlanTensors();
}

absl::Status Exporter::PlanTensors() {
  StDtype convert_to = StDtype::kF32;
  if (options_.dtype.has_value() && !ToStDtype(*options_.dtype, &convert_to)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", c10::toString(*options_.dtype), ": use fp32, bf16 or fp16"));
  }
  std::sort(outputs_.begin(), outputs_.end(),
            [](const Output& a, const Output& b) { return a.name < b.name; });
  int64_t elements = 0;
  for (const Output& o : outputs_) {
    int64_t n = 1;
    for (int64_t d : o.shape) n *= d;
    elements += n;
    const bool convert = options_.dtype.has_value() && IsFloating(o.stored);
    const StDtype dtype = convert ? convert_to : o.stored;
    const at::ScalarType target = options_.dtype.value_or(at::kFloat);
    tensors_.push_back(
        {o.name, dtype, o.shape, [&o, convert, target](const StTensorSource::WriteFn& write) {
           return CatchTorch(o.name, [&] {
             std::vector<at::Tensor> pieces;
             for (const Piece& p : o.pieces) {
               pieces.push_back(ReadTensor(*p.file, *p.info));
             }
             at::Tensor full = o.join ? o.join(pieces) : pieces.front();
             pieces.clear();
             if (convert) full = full.to(target);
             full = full.contiguous();
             write(full.data_ptr(), full.numel() * full.element_size());
           });
         }});
  }
  const ParamCount count = CountParams(model_.vision, model_.text);
  if (elements != count.total) {
    return absl::FailedPreconditionError(absl::StrCat(
        options_.checkpoint_dir, ": the shards re-assemble to ", elements, " parameters in ",
        outputs_.size(), " tensors; model ", model_.name, " has ", count.total));
  }
  // The shards' job, step and layout (ResolveSpec checked the layout is layout_'s).
  metadata_ = shards_->First().ExportMetadata(model_.name);
  metadata_["format"] = "pt";  // what transformers expects of a PyTorch safetensors file
  result_.tensors = static_cast<int64_t>(outputs_.size());
  result_.elements = elements;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<AssembledCheckpoint>> AssembledCheckpoint::Open(
    const CheckpointExportOptions& options) {
  auto exporter = std::make_unique<Exporter>(options);
  if (absl::Status s = exporter->Plan(); !s.ok()) return s;
  return std::unique_ptr<AssembledCheckpoint>(std::move(exporter));
}

absl::StatusOr<CheckpointExportResult> ExportCheckpoint(const CheckpointExportOptions& options) {
  absl::StatusOr<std::unique_ptr<AssembledCheckpoint>> ckpt = AssembledCheckpoint::Open(options);
  if (!ckpt.ok()) return ckpt.status();
  const AssembledCheckpoint& c = **ckpt;
  if (absl::Status s = WriteSafetensorsStreamed(options.out_path, c.tensors(), c.metadata());
      !s.ok()) {
    return s;
  }
  CheckpointExportResult result = c.result();
  std::ifstream written(options.out_path, std::ios::binary | std::ios::ate);
  result.bytes = static_cast<int64_t>(written.tellg());
  return result;
}

}  // namespace dhp
