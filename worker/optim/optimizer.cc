#include "worker/optim/optimizer.h"

#include <torch/optim/adamw.h>
#include <torch/version.h>

#include <cmath>
#include <sstream>
#include <tuple>
#include <type_traits>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DHP_HAS_FUSED_ADAMW 1
#endif

namespace dhp {
namespace {

using StateKeyType = typename std::remove_reference_t<
    decltype(std::declval<torch::optim::AdamW&>().state())>::key_type;

// LibTorch's key of a parameter's state: c10::guts::to_string(impl) (1.x) or impl (2.x). A
// template, so that only the branch of the LibTorch at hand is compiled.
template <typename Key = StateKeyType>
Key StateKey(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// The tensors of one group's update: parameters with a gradient and their state.
struct GroupUpdate {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<int64_t> steps;  // after this update
};

struct Hyper {
  double lr, beta1, beta2, eps, weight_decay;
};

// torch.optim.AdamW's single-tensor update (_single_tensor_adamw, not capturable).
void UpdatePerTensor(const GroupUpdate& u, const Hyper& h) {
  for (size_t i = 0; i < u.params.size(); ++i) {
    at::Tensor p = u.params[i], m = u.exp_avgs[i], v = u.exp_avg_sqs[i];
    const at::Tensor& g = u.grads[i];
    if (h.weight_decay != 0) p.mul_(1 - h.lr * h.weight_decay);
    m.lerp_(g, 1 - h.beta1);
    v.mul_(h.beta2).addcmul_(g, g, 1 - h.beta2);
    const double bc1 = 1 - std::pow(h.beta1, static_cast<double>(u.steps[i]));
    const double bc2 = 1 - std::pow(h.beta2, static_cast<double>(u.steps[i]));
    const at::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(h.eps);
    p.addcdiv_(m, denom, -h.lr / bc1);
  }
}

// One fused kernel for the group when every tensor shares a device and a floating dtype (always,
// in dhp); else per tensor.
void UpdateGroup(const GroupUpdate& u, const Hyper& h) {
  if (u.params.empty()) return;
#ifdef DHP_HAS_FUSED_ADAMW
  bool uniform = at::isFloatingType(u.params[0].scalar_type());
  for (const at::Tensor& t : u.params) {
    uniform = uniform && t.device() == u.params[0].device() &&
              t.scalar_type() == u.params[0].scalar_type() && t.is_contiguous();
  }
  if (uniform) {
    // The kernel reads each parameter's step from a float tensor on its device; parameters of a
    // group share a step in practice, so one tensor per distinct value.
    std::vector<at::Tensor> steps;
    std::vector<std::pair<int64_t, at::Tensor>> made;
    for (int64_t step : u.steps) {
      if (made.empty() || made.back().first != step) {
        made.emplace_back(
            step, at::full({}, static_cast<double>(step), u.params[0].options().dtype(at::kFloat)));
      }
      steps.push_back(made.back().second);
    }
    at::_fused_adamw_(u.params, u.grads, u.exp_avgs, u.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps,
                      h.lr, h.beta1, h.beta2, h.weight_decay, h.eps, /*amsgrad=*/false,
                      /*maximize=*/false);
    return;
  }
#endif
  UpdatePerTensor(u, h);
}

bool ReducedPrecision(const at::Tensor& p) {
  return p.scalar_type() == at::kBFloat16 || p.scalar_type() == at::kHalf;
}

}  // namespace

bool UsesWeightDecay(const std::string& name, const at::Tensor& param) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (param.dim() <= 1) return false;
  if (ends_with(".bias") || name == "bias") return false;
  if (name.find("norm") != std::string::npos) return false;
  return true;
}

TrainingOptimizer::TrainingOptimizer(const NamedParams& params, const OptimizerConfig& config)
    : config_(config), lr_(config.learning_rate) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    params_.push_back(p);
    if (ReducedPrecision(p)) masters_[p.unsafeGetTensorImpl()] = p.detach().to(at::kFloat);
    if (UsesWeightDecay(name, p)) {
      decay.push_back(p);
      decay_names_.push_back(name);
    } else {
      no_decay.push_back(p);
      no_decay_names_.push_back(name);
    }
  }
  torch::optim::AdamWOptions defaults(config.learning_rate);
  defaults.betas(std::make_tuple(config.beta1, config.beta2))
      .eps(config.eps)
      .weight_decay(config.weight_decay)
      .amsgrad(false);
  auto no_decay_options = std::make_unique<torch::optim::AdamWOptions>(defaults);
  no_decay_options->weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(defaults));
  groups.emplace_back(no_decay, std::move(no_decay_options));
  adamw_ = std::make_unique<torch::optim::AdamW>(std::move(groups), defaults);
}

TrainingOptimizer::~TrainingOptimizer() = default;

void TrainingOptimizer::ZeroGrad() {
  // Set to None (not zeros), as PyTorch 2.x's zero_grad does: the next backward writes fresh.
  for (at::Tensor& p : params_) {
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
  }
}

double TrainingOptimizer::ClipGradNorm() {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const at::Tensor& p : params_) {
    if (p.grad().defined()) norms.push_back(p.grad().norm(2).to(at::kFloat));
  }
  if (norms.empty()) return 0.0;
  const at::Tensor total = at::stack(norms).norm(2);  // [] fp32, on the parameters' device
  const double norm = total.item<double>();
  if (config_.grad_clip_norm > 0 && std::isfinite(norm) && norm > config_.grad_clip_norm) {
    const double coeff = config_.grad_clip_norm / (norm + 1e-6);
    for (at::Tensor& p : params_) {
      if (p.grad().defined()) p.mutable_grad().mul_(coeff);
    }
  }
  return norm;
}

void TrainingOptimizer::SetLearningRate(double lr) {
  lr_ = lr;
  for (auto& group : adamw_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

torch::optim::AdamWParamState* TrainingOptimizer::StateOf(const at::Tensor& p, bool create) {
  auto& map = adamw_->state();
  const StateKeyType key = StateKey(p);
  auto it = map.find(key);
  if (it != map.end()) return static_cast<torch::optim::AdamWParamState*>(it->second.get());
  if (!create) return nullptr;
  auto state = std::make_unique<torch::optim::AdamWParamState>();
  state->step(0);
  // Moments in fp32 for a reduced-precision parameter (like its master), else in its dtype.
  const at::TensorOptions moments = p.options().dtype(ReducedPrecision(p) ? at::kFloat
                                                                          : p.scalar_type());
  state->exp_avg(at::zeros_like(p, moments, at::MemoryFormat::Preserve));
  state->exp_avg_sq(at::zeros_like(p, moments, at::MemoryFormat::Preserve));
  torch::optim::AdamWParamState* raw = state.get();
  map[key] = std::move(state);
  return raw;
}

void TrainingOptimizer::EraseState(const at::Tensor& p) { adamw_->state().erase(StateKey(p)); }

at::Tensor TrainingOptimizer::MasterOf(const at::Tensor& p) const {
  auto it = masters_.find(p.unsafeGetTensorImpl());
  return it == masters_.end() ? at::Tensor() : it->second;
}

void TrainingOptimizer::SetMaster(const at::Tensor& p, const at::Tensor& master) {
  at::NoGradGuard no_grad;
  auto it = masters_.find(p.unsafeGetTensorImpl());
  if (it == masters_.end()) return;
  if (!master.defined()) {
    it->second.copy_(p.detach());
    return;
  }
  it->second.copy_(master.view(p.sizes()));
  p.detach().copy_(it->second);
}

void TrainingOptimizer::Step() {
  at::NoGradGuard no_grad;
  for (auto& group : adamw_->param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const Hyper hyper{o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(),
                      o.weight_decay()};
    GroupUpdate u;  // the parameters that are their own master, in one update
    for (at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::optim::AdamWParamState* s = StateOf(p, /*create=*/true);
      s->step(s->step() + 1);
      const at::Tensor master = MasterOf(p);
      if (master.defined()) {
        // One tensor at a time: its fp32 gradient is the only transient.
        GroupUpdate one;
        one.params = {master};
        one.grads = {p.grad().to(at::kFloat)};
        one.exp_avgs = {s->exp_avg()};
        one.exp_avg_sqs = {s->exp_avg_sq()};
        one.steps = {s->step()};
        UpdateGroup(one, hyper);
        p.detach().copy_(master);
        continue;
      }
      u.params.push_back(p);
      u.grads.push_back(p.grad());
      u.exp_avgs.push_back(s->exp_avg());
      u.exp_avg_sqs.push_back(s->exp_avg_sq());
      u.steps.push_back(s->step());
    }
    UpdateGroup(u, hyper);
  }
}

}  // namespace dhp
