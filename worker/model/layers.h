// Building blocks shared by the vision tower and the text decoder: RMSNorm, a linear layer whose
// parameters come from a ParamFactory, and the gated SiLU MLP.
//
// Modules follow LibTorch's holder pattern (FooImpl + TORCH_MODULE(Foo)); their parameter names
// are those of the Hugging Face checkpoints. Constructors that take a ParamFactory
// (param_factory.h) register exactly the tensors it yields, so a rank builds them shard-first
// (only what it keeps, in its dtype and device) and a tensor-parallel variant with sharded sizes;
// the others use LibTorchDefaultInit(). Not thread-safe (modules are owned by one rank's training
// thread).
#ifndef DHP_WORKER_MODEL_LAYERS_H_
#define DHP_WORKER_MODEL_LAYERS_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "worker/model/param_factory.h"

namespace dhp {

// Qwen2RMSNorm: x / sqrt(mean(x^2) + eps) computed in fp32, cast back, times `weight`.
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  // With a given [dim] weight (its dtype and device, e.g. a rank's slice from a TensorSource).
  RmsNormImpl(at::Tensor weight, double eps);
  // With the weight from `make` ("weight", [dim]).
  RmsNormImpl(int64_t dim, double eps, const ParamFactory& make);
  at::Tensor forward(const at::Tensor& x);  // [..., dim] -> [..., dim]

  at::Tensor weight;  // [dim], "weight"

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

// y = x W^T + b, as torch::nn::Linear computes it, with "weight" [out, in] and "bias" [out]
// (when `bias`) asked from `make` in that order, as torch::nn::Linear registers them. The
// tensors may be slices (a tensor-parallel shard): forward uses whatever sizes they have.
class DenseImpl : public torch::nn::Module {
 public:
  DenseImpl(int64_t in, int64_t out, bool bias, const ParamFactory& make);
  at::Tensor forward(const at::Tensor& x);  // [..., in] -> [..., out]

  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined
};
TORCH_MODULE(Dense);

// down_proj(silu(gate_proj(x)) * up_proj(x)). Biases on all three in the vision tower, none in
// the text decoder.
class GatedMlpImpl : public torch::nn::Module {
 public:
  GatedMlpImpl(int64_t hidden, int64_t intermediate, bool bias);
  // Parameters from `make`, named "gate_proj.weight", ... (gate, up, down; weight before bias).
  GatedMlpImpl(int64_t hidden, int64_t intermediate, bool bias, const ParamFactory& make);
  at::Tensor forward(const at::Tensor& x);  // [S, hidden] -> [S, hidden]

  Dense gate_proj{nullptr};  // [intermediate, hidden]
  Dense up_proj{nullptr};    // [intermediate, hidden]
  Dense down_proj{nullptr};  // [hidden, intermediate]
};
TORCH_MODULE(GatedMlp);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_LAYERS_H_
