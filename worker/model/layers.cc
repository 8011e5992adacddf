#include "worker/model/layers.h"

#include <torch/nn/init.h>

namespace dhp {

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : RmsNormImpl(at::ones({dim}), eps) {}

RmsNormImpl::RmsNormImpl(at::Tensor weight_, double eps) : eps_(eps) {
  TORCH_CHECK_VALUE(weight_.dim() == 1, "an RMSNorm weight must be 1-D, got ", weight_.sizes());
  weight = register_parameter("weight", std::move(weight_));
}

at::Tensor RmsNormImpl::forward(const at::Tensor& x) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);  // [..., 1]
  return weight * (xf * at::rsqrt(variance + eps_)).to(x.scalar_type());
}

GatedMlpImpl::GatedMlpImpl(int64_t hidden, int64_t intermediate, bool bias) {
  using torch::nn::LinearOptions;
  gate_proj = register_module("gate_proj",
                              torch::nn::Linear(LinearOptions(hidden, intermediate).bias(bias)));
  up_proj =
      register_module("up_proj", torch::nn::Linear(LinearOptions(hidden, intermediate).bias(bias)));
  down_proj = register_module("down_proj",
                              torch::nn::Linear(LinearOptions(intermediate, hidden).bias(bias)));
}

at::Tensor GatedMlpImpl::forward(const at::Tensor& x) {
  return down_proj(at::silu(gate_proj(x)) * up_proj(x));
}

}  // namespace dhp
