#include "worker/model/param_factory.h"

#include <c10/util/Exception.h>
#include <torch/nn/init.h>

#include <cmath>
#include <utility>

namespace dhp {

at::Tensor MakeParam(const ParamFactory& make, const std::string& name, std::vector<int64_t> shape,
                     ParamRole role, int64_t fan_in) {
  return make(ParamRequest{name, std::move(shape), role, fan_in});
}

ParamFactory ScopedFactory(ParamFactory make, const std::string& prefix) {
  return [make = std::move(make), prefix](const ParamRequest& request) {
    ParamRequest scoped = request;
    scoped.name = prefix + request.name;
    return make(scoped);
  };
}

ParamFactory LibTorchDefaultInit() {
  return [](const ParamRequest& request) {
    at::NoGradGuard no_grad;
    switch (request.role) {
      case ParamRole::kNormWeight:
        return at::ones(request.shape, at::kFloat);
      case ParamRole::kLinearBias: {
        TORCH_CHECK_VALUE(request.fan_in > 0, "bias ", request.name, " has no fan-in");
        const double bound = 1 / std::sqrt(request.fan_in);  // as torch::nn::Linear / ConvNd
        return torch::nn::init::uniform_(at::empty(request.shape, at::kFloat), -bound, bound);
      }
      case ParamRole::kLinearWeight:
        break;
    }
    return torch::nn::init::kaiming_uniform_(at::empty(request.shape, at::kFloat), std::sqrt(5));
  };
}

void CheckSourceTensor(const TensorSource& src, const std::string& name,
                       const ParamRequest& request) {
  TORCH_CHECK_VALUE(src.Has(name), "no tensor ", name, " in the source (the module wants ",
                    at::IntArrayRef(request.shape), ")");
  const std::vector<int64_t> shape = src.Shape(name);
  TORCH_CHECK_VALUE(shape == request.shape, name, ": the source's tensor is ",
                    at::IntArrayRef(shape), " but the module wants ",
                    at::IntArrayRef(request.shape));
}

ParamFactory WholeTensors(const TensorSource& src, const std::string& prefix) {
  return [&src, prefix](const ParamRequest& request) {
    const std::string name = prefix + request.name;
    CheckSourceTensor(src, name, request);
    return src.Whole(name);
  };
}

}  // namespace dhp
