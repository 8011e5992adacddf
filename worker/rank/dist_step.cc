#include "worker/rank/dist_step.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/layout.h"
#include "common/status_macros.h"
#include "worker/model/torch_status.h"
#include "worker/model/vision_window.h"
#include "worker/parallel/tp_state.h"
#include "worker/optim/optimizer_state.h"

namespace dhp {
namespace {

int64_t ImageTokens(const PackedBatch& batch, const VisionConfig& config) {
  int64_t m = 0;
  for (const GridThw& g : batch.image_grids) m += MergedTokens(g, config);
  return m;
}

std::string ShapeText(at::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

// "3 missing (a, b, c)" with at most 5 names.
std::string NameList(const std::vector<std::string>& names, const char* what) {
  std::vector<std::string> shown(names.begin(), names.begin() + std::min<size_t>(names.size(), 5));
  return absl::StrCat(names.size(), " ", what, " (", absl::StrJoin(shown, "; "),
                      names.size() > shown.size() ? "; ..." : "", ")");
}

constexpr char kStepName[] = "trainer.step";
constexpr char kZeroPrefix[] = "optim.vision.";
constexpr char kTextOptPrefix[] = "optim.text.";

}  // namespace

DistTrainer::DistTrainer(const ModelPreset& preset, comm::ProcessGroups& groups,
                         comm::Communicator* handoff, const DistTrainerOptions& options)
    : preset_(preset), groups_(groups), handoff_(handoff), options_(options) {}

absl::StatusOr<std::unique_ptr<DistTrainer>> DistTrainer::Create(
    const ModelPreset& preset, Qwen2_5_VL model, comm::ProcessGroups& groups,
    comm::Communicator* handoff, const DistTrainerOptions& options) {
  return Create(preset, ModuleTensorSource(*model), groups, handoff, options);
}

absl::StatusOr<std::unique_ptr<DistTrainer>> DistTrainer::Create(
    const ModelPreset& preset, const TensorSource& source, comm::ProcessGroups& groups,
    comm::Communicator* handoff, const DistTrainerOptions& options) {
  const comm::Layout& layout = groups.layout();
  if (!layout.HandOffInMemory() && handoff == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistTrainer: layout ", layout.DebugString(),
        " moves the hand-off over the wire; pass a \"handoff\" communicator over the world"));
  }
  std::unique_ptr<DistTrainer> t(new DistTrainer(preset, groups, handoff, options));
  if (groups.vision_coord().has_value()) DHP_RETURN_IF_ERROR(t->BuildVision(source));
  if (groups.text_coord().has_value()) DHP_RETURN_IF_ERROR(t->BuildText(source));
  return t;
}

absl::Status DistTrainer::BuildVision(const TensorSource& source) {
  const comm::Layout& layout = groups_.layout();
  VisionTransformer tower{nullptr};
  if (layout.vision_parallelism == comm::VisionParallelism::kTensor) {
    absl::StatusOr<std::unique_ptr<VisionTpTransformer>> v =
        VisionTpTransformer::Create(preset_.vision, source, "visual.", *groups_.vision_inner());
    if (!v.ok()) return v.status();
    vision_tp_ = std::move(*v);
    tower = vision_tp_->model();
  } else {
    DHP_RETURN_IF_ERROR(CatchTorch("building the vision tower", [&] {
      tower_ = VisionTransformer(preset_.vision);
      at::NoGradGuard no_grad;
      for (auto& item : tower_->named_parameters(/*recurse=*/true)) {
        const std::string name = "visual." + item.key();
        TORCH_CHECK_VALUE(source.Shape(name) == item.value().sizes().vec(), name, ": source ",
                          at::IntArrayRef(source.Shape(name)), ", tower ", item.value().sizes());
        item.value().set_data(source.Whole(name));
      }
    }));
    absl::StatusOr<std::unique_ptr<UlyssesVisionTransformer>> v =
        UlyssesVisionTransformer::Create(tower_, *groups_.vision_inner());
    if (!v.ok()) return v.status();
    vision_ = std::move(*v);
    tower = tower_;
  }
  tower->set_gradient_checkpointing(options_.vision_activation_checkpointing);
  for (const auto& item : tower->parameters()) {
    device_ = item.device();
    break;
  }
  Zero1AdamW::NamedParams params;
  std::vector<double> norm_weights;
  for (const auto& item : tower->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    params.emplace_back("visual." + item.key(), item.value());
    if (vision_tp_ == nullptr) continue;  // Ulysses: every element counted once already
    // Vision TP: replicated parameters are held by all Sv ranks of the replica.
    norm_weights.push_back(VisionTpShardOf(item.key()) == VisionTpShardKind::kReplicated
                               ? 1.0 / layout.vision_degree
                               : 1.0);
  }
  comm::Communicator& zero_group =
      vision_tp_ != nullptr ? *groups_.vision_dp() : *groups_.vision();
  zero1_ = std::make_unique<Zero1AdamW>(params, options_.optimizer, zero_group, norm_weights);
  return absl::OkStatus();
}

absl::Status DistTrainer::BuildText(const TensorSource& source) {
  absl::StatusOr<tp::TextTpModel> text =
      tp::CreateTextTpModel(preset_.text, source, *groups_.text_tp());
  if (!text.ok()) return text.status();
  text_ = *text;
  text_->set_gradient_checkpointing(options_.text_activation_checkpointing);
  for (const auto& item : text_->parameters()) {
    device_ = item.device();
    break;
  }
  text_opt_ = std::make_unique<TrainingOptimizer>(TextParams(), options_.optimizer);
  return absl::OkStatus();
}

absl::StatusOr<DistStepResult> DistTrainer::Step(const std::vector<PackedBatch>& batches,
                                                 bool gather_grads) {
  absl::StatusOr<DistStepResult> result;
  absl::Status caught = CatchTorch("distributed step", [&] {
    result = StepImpl(batches, gather_grads);
  });
  if (!caught.ok()) return caught;
  return result;
}

absl::StatusOr<DistStepResult> DistTrainer::StepImpl(const std::vector<PackedBatch>& batches,
                                                     bool gather_grads) {
  const comm::Layout& layout = groups_.layout();
  const int me = groups_.world_rank();
  if (static_cast<int>(batches.size()) != layout.dp) {
    return absl::InvalidArgumentError(absl::StrCat("DistTrainer::Step: got ", batches.size(),
                                                   " packed sequences for dp = ", layout.dp,
                                                   "; pass one per data-parallel replica"));
  }
  DistStepResult result;
  result.lr = LearningRateAt(options_.schedule, step_);
  // Wall time per phase; collectives issued inside a forward or backward pass (Ulysses
  // all-to-all, TP all-reduce) count to that pass, the hand-offs and reductions to comm.
  std::chrono::steady_clock::time_point mark = std::chrono::steady_clock::now();
  auto lap = [&mark](double* phase) {
    const auto now = std::chrono::steady_clock::now();
    *phase += std::chrono::duration<double>(now - mark).count();
    mark = now;
  };
  const std::optional<comm::StageCoord>& vc = groups_.vision_coord();
  const std::optional<comm::StageCoord>& tc = groups_.text_coord();

  // 1. Vision forward.
  at::Tensor vision_out;  // [M_d, H]
  if (vc.has_value() && !batches[vc->replica].image_grids.empty()) {
    const PackedBatch& b = batches[vc->replica];
    absl::StatusOr<VisionWindowPlan> plan = MakeVisionWindowPlan(b.image_grids, preset_.vision);
    if (!plan.ok()) return plan.status();
    if (vision_tp_ != nullptr) {
      vision_out = vision_tp_->Forward(b.pixel_values, *plan).contiguous();
    } else {
      absl::StatusOr<VisionSequenceSplit> split = vision_->Split(*plan);
      if (!split.ok()) return split.status();
      vision_out = vision_->Forward(b.pixel_values, *plan, *split).contiguous();
    }
  }

  lap(&result.forward_s);

  // 2. Hand-off forward: text (d, j) <- vision (d, j mod Sv).
  at::Tensor text_image;  // [M_d, H] on text ranks
  for (int d = 0; d < layout.dp; ++d) {
    if (batches[d].image_grids.empty()) continue;
    const int64_t m = ImageTokens(batches[d], preset_.vision);
    for (int j = 0; j < layout.text_degree; ++j) {
      const int src = comm::VisionWorldRank(layout, d, j % layout.vision_degree);
      const int dst = comm::TextWorldRank(layout, d, j);
      if (src == dst) {
        if (me == dst) text_image = vision_out.detach();  // alias: zero bytes
      } else if (me == src) {
        DHP_RETURN_IF_ERROR(handoff_->Send(vision_out.detach(), dst, /*tag=*/0));
      } else if (me == dst) {
        text_image = at::empty({m, preset_.vision.out_hidden_size},
                               at::TensorOptions().dtype(at::kFloat).device(device_));
        DHP_RETURN_IF_ERROR(handoff_->Recv(text_image, src, /*tag=*/0));
      }
    }
  }

  lap(&result.comm_s);

  // 3. Text forward, loss, backward.
  at::Tensor image_grad;  // [M_d, H] on text ranks
  if (tc.has_value()) {
    const PackedBatch& b = batches[tc->replica];
    at::Tensor embeds = text_->Embed(b.input_ids);
    if (text_image.defined()) {
      text_image.requires_grad_(true);
      embeds = ScatterImageEmbeddings(embeds, b.input_ids, preset_.tokens.image_pad, text_image);
    }
    at::Tensor pos = b.position_ids;
    if (!pos.defined()) {
      absl::StatusOr<at::Tensor> p = ComputePositionIds(b, preset_);
      if (!p.ok()) return p.status();
      pos = *p;
    }
    auto [sum, count] = text_->forward(embeds, pos, b.labels, b.cu_seqlens);
    at::Tensor stats = at::stack({sum.detach().to(at::kDouble), count.to(at::kDouble)});
    DHP_RETURN_IF_ERROR(groups_.text_dp()->AllReduce(stats, comm::ReduceOp::kSum));
    const double global_count = stats[1].item<double>();
    result.loss = stats[0].item<double>() / global_count;
    lap(&result.forward_s);
    (sum / global_count).backward();
    if (text_image.defined()) {
      image_grad = text_image.grad().defined() ? text_image.grad() : at::zeros_like(text_image);
      image_grad = image_grad.contiguous();
    }
  }

  lap(&result.backward_s);

  // 4. Gradient hand-off: vision (d, i) <- text (d, i mod Tt).
  at::Tensor vision_grad;
  for (int d = 0; d < layout.dp; ++d) {
    if (batches[d].image_grids.empty()) continue;
    const int64_t m = ImageTokens(batches[d], preset_.vision);
    for (int i = 0; i < layout.vision_degree; ++i) {
      const int src = comm::TextWorldRank(layout, d, i % layout.text_degree);
      const int dst = comm::VisionWorldRank(layout, d, i);
      if (src == dst) {
        if (me == dst) vision_grad = image_grad;  // by reference
      } else if (me == src) {
        DHP_RETURN_IF_ERROR(handoff_->Send(image_grad, dst, /*tag=*/1));
      } else if (me == dst) {
        vision_grad = at::empty({m, preset_.vision.out_hidden_size},
                                at::TensorOptions().dtype(at::kFloat).device(device_));
        DHP_RETURN_IF_ERROR(handoff_->Recv(vision_grad, src, /*tag=*/1));
      }
    }
  }

  lap(&result.comm_s);

  // 5. Vision backward.
  if (vision_out.defined()) vision_out.backward(vision_grad);
  lap(&result.backward_s);

  // 6. Reductions.
  double local_sq = 0;
  if (vc.has_value()) {
    DHP_RETURN_IF_ERROR(zero1_->ReduceScatterGradients());
    local_sq += zero1_->PartialGradSquaredNorm();
  }
  if (tc.has_value()) {
    DHP_RETURN_IF_ERROR(tp::FinishTpGradients(*text_, text_->shard_layout(), *groups_.text_tp()));
    DHP_RETURN_IF_ERROR(tp::AllReduceDataParallelGrads(*text_, *groups_.text_dp()));
    absl::StatusOr<double> sq =
        tp::GradSquaredNorm(*text_, text_->shard_layout(), *groups_.text_tp());
    if (!sq.ok()) return sq.status();
    local_sq += *sq / layout.TextSize();  // the same on every text rank
  }

  // 7. Global norm: one all-reduce over the world.
  at::Tensor total = at::tensor({local_sq}, at::kDouble);
  DHP_RETURN_IF_ERROR(groups_.world().AllReduce(total, comm::ReduceOp::kSum));
  result.grad_norm = std::sqrt(total.item<double>());
  const double coef = ClipCoefficient(result.grad_norm, options_.optimizer.grad_clip_norm);

  if (gather_grads) {
    if (vc.has_value()) {
      comm::Communicator& vg = zero1_->group();
      at::Tensor full = zero1_->grad_partition();
      if (vg.size() > 1) {
        absl::StatusOr<at::Tensor> g = vg.AllGather(zero1_->grad_partition());
        if (!g.ok()) return g.status();
        full = *g;
      }
      VisionTransformer& tower = vision_tp_ != nullptr ? vision_tp_->model() : tower_;
      int64_t offset = 0;
      for (const auto& item : tower->named_parameters()) {
        const at::Tensor& p = item.value();
        if (!p.requires_grad()) continue;
        at::Tensor grad = full.narrow(0, offset, p.numel()).view(p.sizes()).clone();
        offset += p.numel();
        if (vision_tp_ != nullptr) {  // re-assemble the shards over the vision TP group
          comm::Communicator& tp = *groups_.vision_inner();
          absl::StatusOr<at::Tensor> all = tp.AllGather(grad.unsqueeze(0));
          if (!all.ok()) return all.status();
          std::vector<at::Tensor> shards;
          for (int r = 0; r < tp.size(); ++r) shards.push_back((*all)[r]);
          grad = UnshardVisionTensor(item.key(), shards);
        }
        result.grads.emplace_back("visual." + item.key(), grad);
      }
    }
    if (tc.has_value()) {
      absl::StatusOr<NamedTensors> g = tp::GatherFullTensors(
          *text_, text_->shard_layout(), *groups_.text_tp(), tp::TensorKind::kGradients);
      if (!g.ok()) return g.status();
      for (auto& nt : *g) result.grads.push_back(std::move(nt));
    }
  }

  lap(&result.comm_s);

  // 8. Optimizer steps.
  if (vc.has_value()) {
    DHP_RETURN_IF_ERROR(zero1_->Step(result.lr, coef));
    zero1_->ZeroGrad();
  }
  if (tc.has_value()) {
    {
      at::NoGradGuard no_grad;
      for (const auto& item : text_->named_parameters()) {
        if (item.value().grad().defined() && coef != 1.0) item.value().mutable_grad().mul_(coef);
      }
    }
    text_opt_->SetLearningRate(result.lr);
    text_opt_->Step();
    text_opt_->ZeroGrad();
  }
  lap(&result.optimizer_s);
  ++step_;
  return result;
}

absl::StatusOr<DistTrainer::NamedTensors> DistTrainer::FullParameters() {
  NamedTensors out;
  absl::Status st = CatchTorch("full parameters", [&] {
    if (groups_.vision_coord().has_value() && vision_tp_ == nullptr) {
      for (const auto& item : tower_->named_parameters()) {
        out.emplace_back("visual." + item.key(), item.value().detach().clone());
      }
    }
  });
  if (!st.ok()) return st;
  if (vision_tp_ != nullptr) {
    absl::StatusOr<std::map<std::string, at::Tensor>> full = vision_tp_->GatherFullParameters();
    if (!full.ok()) return full.status();
    for (auto& [name, tensor] : *full) out.emplace_back("visual." + name, tensor);
  }
  if (groups_.text_coord().has_value()) {
    absl::StatusOr<NamedTensors> t = tp::GatherFullTensors(
        *text_, text_->shard_layout(), *groups_.text_tp(), tp::TensorKind::kParameters);
    if (!t.ok()) return t.status();
    for (auto& nt : *t) out.push_back(std::move(nt));
  }
  return out;
}

DistTrainer::NamedTensors DistTrainer::VisionParams() const {
  NamedTensors out;
  if (!groups_.vision_coord().has_value()) return out;
  VisionTransformer tower = vision_tp_ != nullptr ? vision_tp_->model() : tower_;
  for (const auto& item : tower->named_parameters()) {
    out.emplace_back("visual." + item.key(), item.value());
  }
  return out;
}

DistTrainer::NamedTensors DistTrainer::TextParams() const {
  NamedTensors out;
  if (!text_) return out;
  for (const auto& item : text_->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

absl::StatusOr<DistTrainer::NamedTensors> DistTrainer::State() {
  absl::StatusOr<NamedTensors> live = LiveState();
  if (!live.ok()) return live.status();
  absl::Status s = CatchTorch("trainer state", [&] {
    for (auto& [name, t] : *live) t = t.clone();
  });
  if (!s.ok()) return s;
  return live;
}

absl::StatusOr<DistTrainer::NamedTensors> DistTrainer::LiveState() {
  NamedTensors out;
  absl::Status s = CatchTorch("trainer state", [&] {
    at::NoGradGuard no_grad;
    out.emplace_back(kStepName, at::tensor({step_}, at::kLong));
    for (const auto& [name, p] : VisionParams()) out.emplace_back(name, p.detach());
    if (zero1_ != nullptr) {
      Zero1AdamW::PartitionState z = zero1_->StateView();
      out.emplace_back(absl::StrCat(kZeroPrefix, "master"), z.master);
      out.emplace_back(absl::StrCat(kZeroPrefix, "exp_avg"), z.exp_avg);
      out.emplace_back(absl::StrCat(kZeroPrefix, "exp_avg_sq"), z.exp_avg_sq);
      out.emplace_back(absl::StrCat(kZeroPrefix, "step"), at::tensor({z.step}, at::kLong));
    }
    const NamedTensors text = TextParams();
    for (const auto& [name, p] : text) out.emplace_back(name, p.detach());
    if (text_opt_ != nullptr) {
      for (auto& nt : AdamWStateTensors(*text_opt_, text, kTextOptPrefix, /*copy=*/false)) {
        out.push_back(std::move(nt));
      }
    }
  });
  if (!s.ok()) return s;
  return out;
}

absl::Status DistTrainer::LoadState(const NamedTensors& state) {
  absl::Status result;
  absl::Status caught = CatchTorch("loading trainer state", [&] { result = LoadStateImpl(state); });
  return caught.ok() ? result : caught;
}

absl::Status DistTrainer::LoadStateImpl(const NamedTensors& state) {
  std::map<std::string, at::Tensor> rest;
  std::vector<std::string> missing, unexpected, wrong;
  for (const auto& [name, t] : state) {
    if (!rest.emplace(name, t).second) unexpected.push_back(name + " (twice)");
  }
  // Takes a required tensor of the given shape out of `rest`; records what is wrong.
  const auto take = [&](const std::string& name, at::IntArrayRef sizes) -> at::Tensor {
    auto it = rest.find(name);
    if (it == rest.end()) {
      missing.push_back(name);
      return at::Tensor();
    }
    at::Tensor t = it->second;
    rest.erase(it);
    if (t.sizes() != sizes) {
      wrong.push_back(absl::StrCat(name, ": checkpoint ", ShapeText(t.sizes()), ", this rank ",
                                   ShapeText(sizes)));
      return at::Tensor();
    }
    return t;
  };
  // The partition sizes first: they differ whenever the layout does (and lead the message).
  const at::Tensor step = take(kStepName, {1});
  Zero1AdamW::PartitionState zero;
  if (zero1_ != nullptr) {
    const int64_t n = zero1_->partition_numel();
    zero.master = take(absl::StrCat(kZeroPrefix, "master"), {n});
    zero.exp_avg = take(absl::StrCat(kZeroPrefix, "exp_avg"), {n});
    zero.exp_avg_sq = take(absl::StrCat(kZeroPrefix, "exp_avg_sq"), {n});
    const at::Tensor z = take(absl::StrCat(kZeroPrefix, "step"), {1});
    if (z.defined()) zero.step = z.to(at::kLong).item<int64_t>();
  }
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (parameter, stored)
  for (const auto& [name, p] : VisionParams()) copies.emplace_back(p, take(name, p.sizes()));
  const NamedTensors text = TextParams();
  for (const auto& [name, p] : text) copies.emplace_back(p, take(name, p.sizes()));
  absl::StatusOr<std::vector<std::optional<AdamWParamTensors>>> adam =
      std::vector<std::optional<AdamWParamTensors>>{};
  if (text_opt_ != nullptr) adam = TakeAdamWState(text, kTextOptPrefix, &rest);
  for (const auto& [name, t] : rest) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !wrong.empty() || !adam.ok()) {
    std::vector<std::string> parts;
    if (!missing.empty()) parts.push_back(NameList(missing, "missing"));
    if (!unexpected.empty()) parts.push_back(NameList(unexpected, "unexpected"));
    if (!wrong.empty()) parts.push_back(NameList(wrong, "of another shape"));
    if (!adam.ok()) parts.emplace_back(adam.status().message());
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint state does not fit world rank ", groups_.world_rank(), " of layout ",
        groups_.layout().DebugString(), ": ", absl::StrJoin(parts, "; "),
        ". Was it written by another layout, rank or model?"));
  }
  if (step.scalar_type() != at::kLong || step.item<int64_t>() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kStepName, ": expected a non-negative int64 step count"));
  }
  if (zero1_ != nullptr) {
    if (absl::Status s = zero1_->LoadState(zero); !s.ok()) return s;
  }
  at::NoGradGuard no_grad;
  for (auto& [p, stored] : copies) p.detach().copy_(stored);
  if (text_opt_ != nullptr) SetAdamWState(*text_opt_, text, *adam);
  step_ = step.item<int64_t>();
  return absl::OkStatus();
}

}  // namespace dhp
