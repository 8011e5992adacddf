#include "worker/parallel/zero1.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace dhp {

double ClipCoefficient(double global_norm, double max_norm) {
  if (max_norm > 0 && std::isfinite(global_norm) && global_norm > max_norm) {
    return max_norm / (global_norm + 1e-6);
  }
  return 1.0;
}

Zero1AdamW::Zero1AdamW(const NamedParams& params, const OptimizerConfig& config,
                       comm::Communicator& group, const std::vector<double>& norm_weights,
                       at::ScalarType reduce_dtype)
    : config_(config), group_(group), reduce_dtype_(reduce_dtype) {
  std::vector<at::Tensor> masks, weights;
  for (const auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    const size_t index = params_.size();
    TORCH_CHECK(norm_weights.empty() || index < norm_weights.size(),
                "Zero1AdamW: fewer norm weights than trainable parameters");
    weights.push_back(at::full({p.numel()}, norm_weights.empty() ? 1.0 : norm_weights[index],
                               at::TensorOptions().dtype(at::kDouble)));
    params_.push_back(p);
    full_numel_ += p.numel();
    masks.push_back(at::full({p.numel()}, UsesWeightDecay(name, p) ? 1.0 : 0.0,
                             at::TensorOptions().dtype(at::kFloat)));
  }
  // Every buffer lives where the parameters do: on a GPU the partition update runs there and
  // the collectives (NCCL) get device tensors.
  if (!params_.empty()) device_ = params_.front().device();
  // The all-gather travels in the parameters' dtype when they share a reduced precision.
  if (!params_.empty()) {
    const at::ScalarType first = params_.front().scalar_type();
    bool same = first == at::kBFloat16 || first == at::kHalf;
    for (const at::Tensor& p : params_) same = same && p.scalar_type() == first;
    if (same) gather_dtype_ = first;
  }
  const int64_t n = group_.size();
  part_numel_ = (full_numel_ + n - 1) / n;
  if (part_numel_ == 0) part_numel_ = 1;
  const int64_t begin = part_numel_ * group_.rank();
  at::NoGradGuard no_grad;
  at::Tensor flat = Flatten(/*grads=*/false, at::kFloat);
  master_ = flat.narrow(0, begin, part_numel_).clone();
  exp_avg_ = at::zeros_like(master_);
  exp_avg_sq_ = at::zeros_like(master_);
  at::Tensor mask = at::zeros({part_numel_ * n}, at::kFloat);
  if (!masks.empty()) mask.narrow(0, 0, full_numel_).copy_(at::cat(masks));
  decay_mask_ = mask.narrow(0, begin, part_numel_).clone().to(device_);
  at::Tensor weight = at::zeros({part_numel_ * n}, at::kDouble);
  if (!weights.empty()) weight.narrow(0, 0, full_numel_).copy_(at::cat(weights));
  norm_weight_ = weight.narrow(0, begin, part_numel_).clone().to(device_);
  grad_part_ = at::zeros_like(master_);
}

at::Tensor Zero1AdamW::Flatten(bool grads, at::ScalarType dtype) const {
  at::NoGradGuard no_grad;
  const int64_t n = group_.size();
  at::Tensor flat = at::zeros({part_numel_ * n}, at::TensorOptions(dtype).device(device_));
  int64_t offset = 0;
  for (const at::Tensor& p : params_) {
    const int64_t k = p.numel();
    at::Tensor src = grads ? p.grad() : p.detach();
    if (src.defined()) flat.narrow(0, offset, k).copy_(src.reshape({-1}));
    offset += k;
  }
  return flat;
}

void Zero1AdamW::ZeroGrad() {
  for (at::Tensor& p : params_) {
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
  }
}

absl::Status Zero1AdamW::ReduceScatterGradients() {
  at::Tensor flat = Flatten(/*grads=*/true, reduce_dtype_);
  if (group_.size() == 1) {
    grad_part_ = flat.to(at::kFloat);
    return absl::OkStatus();
  }
  absl::StatusOr<at::Tensor> part = group_.ReduceScatter(flat);
  if (!part.ok()) return part.status();
  grad_part_ = part->to(at::kFloat);
  return absl::OkStatus();
}

double Zero1AdamW::PartialGradSquaredNorm() const {
  return (grad_part_.to(at::kDouble).pow(2) * norm_weight_).sum().item<double>();
}

absl::Status Zero1AdamW::Step(double lr, double clip_coef) {
  at::NoGradGuard no_grad;
  ++step_;
  at::Tensor grad = grad_part_;
  if (clip_coef != 1.0) grad = grad * clip_coef;
  // LibTorch's AdamW (torch/csrc/api/src/optim/adamw.cpp), elementwise on the partition.
  if (config_.weight_decay != 0) {
    const double factor = 1 - lr * config_.weight_decay;
    master_.mul_(at::where(decay_mask_ > 0, at::full_like(master_, factor),
                           at::ones_like(master_)));
  }
  const double bias_correction1 = 1 - std::pow(config_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1 - std::pow(config_.beta2, static_cast<double>(step_));
  exp_avg_.mul_(config_.beta1).add_(grad, 1 - config_.beta1);
  exp_avg_sq_.mul_(config_.beta2).addcmul_(grad, grad, 1 - config_.beta2);
  at::Tensor denom = (exp_avg_sq_.sqrt() / std::sqrt(bias_correction2)).add_(config_.eps);
  const double step_size = lr / bias_correction1;
  master_.addcdiv_(exp_avg_, denom, -step_size);

  at::Tensor full = master_.to(gather_dtype_);
  if (group_.size() > 1) {
    absl::StatusOr<at::Tensor> gathered = group_.AllGather(full);
    if (!gathered.ok()) return gathered.status();
    full = *gathered;
  }
  int64_t offset = 0;
  for (at::Tensor& p : params_) {
    const int64_t k = p.numel();
    p.detach().copy_(full.narrow(0, offset, k).view(p.sizes()));
    offset += k;
  }
  return absl::OkStatus();
}

int64_t Zero1AdamW::state_bytes() const {
  return master_.nbytes() + exp_avg_.nbytes() + exp_avg_sq_.nbytes();
}

Zero1AdamW::PartitionState Zero1AdamW::State() const {
  PartitionState st = StateView();
  st.master = st.master.clone();
  st.exp_avg = st.exp_avg.clone();
  st.exp_avg_sq = st.exp_avg_sq.clone();
  return st;
}

Zero1AdamW::PartitionState Zero1AdamW::StateView() const {
  PartitionState st;
  st.master = master_;
  st.exp_avg = exp_avg_;
  st.exp_avg_sq = exp_avg_sq_;
  st.step = step_;
  return st;
}

absl::Status Zero1AdamW::LoadState(const PartitionState& state) {
  const std::pair<const char*, const at::Tensor*> parts[] = {
      {"master", &state.master}, {"exp_avg", &state.exp_avg}, {"exp_avg_sq", &state.exp_avg_sq}};
  for (const auto& [name, t] : parts) {
    if (!t->defined() || t->dim() != 1 || t->numel() != part_numel_ ||
        t->scalar_type() != at::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ZeRO-1 ", name, ": the checkpoint holds ",
          t->defined() ? absl::StrCat(t->numel(), " ", c10::toString(t->scalar_type()), " elements")
                       : std::string("nothing"),
          ", this rank's partition is ", part_numel_, " fp32 elements (", full_numel_,
          " parameters over ", group_.size(), " ranks of group ", group_.name(),
          "): was it written by another layout?"));
    }
  }
  if (state.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ZeRO-1 step: ", state.step, " is negative"));
  }
  at::NoGradGuard no_grad;
  master_.copy_(state.master);
  exp_avg_.copy_(state.exp_avg);
  exp_avg_sq_.copy_(state.exp_avg_sq);
  step_ = state.step;
  return absl::OkStatus();
}

}  // namespace dhp
