// Building blocks shared by the vision tower and the text decoder: RMSNorm, the gated SiLU MLP,
// and the Hugging Face weight initialisation.
//
// Modules follow LibTorch's holder pattern (FooImpl + TORCH_MODULE(Foo)); their parameter names
// are those of the Hugging Face checkpoints. Linear layers are plain torch::nn::Linear with the
// sizes passed in, so a tensor-parallel variant can build the same modules with sharded sizes.
// Not thread-safe (modules are owned by one rank's training thread).
#ifndef DHP_WORKER_MODEL_LAYERS_H_
#define DHP_WORKER_MODEL_LAYERS_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace dhp {

// Qwen2RMSNorm: x / sqrt(mean(x^2) + eps) computed in fp32, cast back, times `weight`.
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  // With a given [dim] weight (its dtype and device, e.g. a rank's slice from a TensorSource).
  RmsNormImpl(at::Tensor weight, double eps);
  at::Tensor forward(const at::Tensor& x);  // [..., dim] -> [..., dim]

  at::Tensor weight;  // [dim], "weight"

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

// down_proj(silu(gate_proj(x)) * up_proj(x)). Biases on all three in the vision tower, none in
// the text decoder.
class GatedMlpImpl : public torch::nn::Module {
 public:
  GatedMlpImpl(int64_t hidden, int64_t intermediate, bool bias);
  at::Tensor forward(const at::Tensor& x);  // [S, hidden] -> [S, hidden]

  torch::nn::Linear gate_proj{nullptr};  // [intermediate, hidden]
  torch::nn::Linear up_proj{nullptr};    // [intermediate, hidden]
  torch::nn::Linear down_proj{nullptr};  // [hidden, intermediate]
};
TORCH_MODULE(GatedMlp);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_LAYERS_H_
