#include "worker/model/layers.h"

#include <torch/nn/init.h>

namespace dhp {

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}));
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

void InitQwenWeights(torch::nn::Module& module, double std) {
  at::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    at::Tensor& p = item.value();
    const std::string& name = item.key();
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_bias) {
      p.zero_();
    } else if (p.dim() == 1) {
      p.fill_(1.0);
    } else {
      p.normal_(0.0, std);
    }
  }
}

}  // namespace dhp
