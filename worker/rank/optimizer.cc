#include "worker/rank/optimizer.h"

#include <torch/optim/adamw.h>

#include <cmath>
#include <tuple>

namespace dhp {

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

void TrainingOptimizer::Step() { adamw_->step(); }

}  // namespace dhp
