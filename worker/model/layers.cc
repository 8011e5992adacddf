#include "worker/model/layers.h"

namespace dhp {

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : RmsNormImpl(at::ones({dim}), eps) {}

RmsNormImpl::RmsNormImpl(at::Tensor weight_, double eps) : eps_(eps) {
  TORCH_CHECK_VALUE(weight_.dim() == 1, "an RMSNorm weight must be 1-D, got ", weight_.sizes());
  weight = register_parameter("weight", std::move(weight_));
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps, const ParamFactory& make)
    : RmsNormImpl(MakeParam(make, "weight", {dim}, ParamRole::kNormWeight), eps) {}

at::Tensor RmsNormImpl::forward(const at::Tensor& x) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);  // [..., 1]
  return weight * (xf * at::rsqrt(variance + eps_)).to(x.scalar_type());
}

DenseImpl::DenseImpl(int64_t in, int64_t out, bool bias_too, const ParamFactory& make) {
  weight = register_parameter("weight",
                              MakeParam(make, "weight", {out, in}, ParamRole::kLinearWeight));
  if (bias_too) {
    bias = register_parameter("bias",
                              MakeParam(make, "bias", {out}, ParamRole::kLinearBias, /*fan_in=*/in));
  }
}

at::Tensor DenseImpl::forward(const at::Tensor& x) { return at::linear(x, weight, bias); }

GatedMlpImpl::GatedMlpImpl(int64_t hidden, int64_t intermediate, bool bias)
    : GatedMlpImpl(hidden, intermediate, bias, LibTorchDefaultInit()) {}

GatedMlpImpl::GatedMlpImpl(int64_t hidden, int64_t intermediate, bool bias,
                           const ParamFactory& make) {
  gate_proj = register_module("gate_proj",
                              Dense(hidden, intermediate, bias, ScopedFactory(make, "gate_proj.")));
  up_proj =
      register_module("up_proj", Dense(hidden, intermediate, bias, ScopedFactory(make, "up_proj.")));
  down_proj = register_module("down_proj",
                              Dense(intermediate, hidden, bias, ScopedFactory(make, "down_proj.")));
}

at::Tensor GatedMlpImpl::forward(const at::Tensor& x) {
  return down_proj(at::silu(gate_proj(x)) * up_proj(x));
}

}  // namespace dhp
