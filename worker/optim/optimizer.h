// The optimizer of a training rank: AdamW over two parameter groups (weight decay on matrices,
// none on biases and norm weights), global-norm gradient clipping, and a per-step learning rate.
//
// Grouping (Megatron-LM's and Hugging Face Trainer's rule): a parameter gets no weight decay when
// it is 1-D, or its name ends in ".bias", or its name contains "norm". In Qwen2.5-VL that is
// every bias and every RMSNorm weight (`model.norm.weight`, `visual.blocks.0.norm1.weight`,
// `visual.merger.ln_q.weight`; all 1-D, so the name rules only matter for other models).
// Every other parameter (linear and embedding matrices, the Conv3d patch embedding) decays.
//
// AdamW keeps its state in LibTorch's torch::optim::AdamW (so checkpoints hold its exp_avg,
// exp_avg_sq and step), but Step() runs the update itself, one kernel per parameter group where
// LibTorch has one: at::_fused_adamw_ (LibTorch 2.4+, CPU and CUDA), the kernel behind
// torch.optim.AdamW(fused=True); otherwise per tensor, in torch.optim.AdamW's single-tensor form
// (exp_avg.lerp_). Same math either way (decoupled decay: p -= lr * wd * p, then the Adam
// update). LibTorch's own AdamW::step() is per tensor with one pass more (mul_ + add_ for the
// first moment) and took 1.7x torch.optim's time at 140 M parameters on the CPU. Betas (0.9, 0.95) and eps 1e-8 by default: the values Qwen2.5-VL, Megatron-LM and
// most LLM recipes train with (beta2 0.95 instead of PyTorch's 0.999 reacts faster to gradient
// scale changes, which keeps large-LR and short runs stable).
//
// Mixed precision: a parameter in a reduced-precision dtype (bf16, fp16) gets an fp32 master
// copy, made from its value at construction, and fp32 moments. Step updates the master from the
// gradient converted to fp32, one tensor at a time (the transient fp32 gradient is one tensor's;
// none when the gradient is fp32 already, as when micro-batches were accumulated in fp32), and
// writes the master back into the parameter, rounded to its dtype. fp32 parameters are their
// own master. Memory per reduced-precision parameter element: 2 (parameter) + 2 (gradient) +
// 4 (master) + 8 (moments) = 16 bytes.
//
// Parameters are borrowed: the tensors (which share storage with the model's) must stay alive.
// Thread-safety: not thread-safe; one training thread owns it.
#ifndef DHP_WORKER_OPTIM_OPTIMIZER_H_
#define DHP_WORKER_OPTIM_OPTIMIZER_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torch {
namespace optim {
class AdamW;
struct AdamWParamState;
}  // namespace optim
}  // namespace torch

namespace dhp {

struct OptimizerConfig {
  double learning_rate = 1e-3;  // initial; the trainer sets it every step
  double weight_decay = 0.0;    // applied to the decay group only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip_norm = 1.0;  // max global L2 norm of the gradients; 0 disables clipping
};

// True when `name` / `param` belongs to the weight-decay group (see the file comment).
bool UsesWeightDecay(const std::string& name, const at::Tensor& param);

class TrainingOptimizer {
 public:
  using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

  // Parameters that do not require grad are left out.
  TrainingOptimizer(const NamedParams& params, const OptimizerConfig& config);
  ~TrainingOptimizer();
  TrainingOptimizer(const TrainingOptimizer&) = delete;
  TrainingOptimizer& operator=(const TrainingOptimizer&) = delete;

  void ZeroGrad();

  // The global L2 norm of all gradients before clipping (parameters without a gradient count as
  // zero); when config.grad_clip_norm > 0 and the norm exceeds it, every gradient is scaled by
  // grad_clip_norm / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_'s rule). May be inf/nan, in
  // which case nothing is scaled: callers should skip Step().
  double ClipGradNorm();

  void SetLearningRate(double lr);
  double learning_rate() const { return lr_; }

  // One AdamW update of every parameter that has a gradient.
  void Step();

  const std::vector<std::string>& decay_names() const { return decay_names_; }
  const std::vector<std::string>& no_decay_names() const { return no_decay_names_; }
  const OptimizerConfig& config() const { return config_; }
  torch::optim::AdamW& adamw() { return *adamw_; }

  // The AdamW state of parameter `p` (one of this optimizer's), or null when it has none; with
  // `create`, a zero state (step 0) is made first. EraseState drops it.
  torch::optim::AdamWParamState* StateOf(const at::Tensor& p, bool create);
  void EraseState(const at::Tensor& p);

  // The fp32 master copy of parameter `p` (one of this optimizer's) when p is in a reduced
  // precision, else undefined. Live: the next Step changes it.
  at::Tensor MasterOf(const at::Tensor& p) const;
  // Replaces p's master by `master` (converted to fp32, p's shape) and p's value by the master
  // rounded to p's dtype; without a master (p in fp32 or `master` undefined) the master becomes
  // p's current value. For checkpoint loads.
  void SetMaster(const at::Tensor& p, const at::Tensor& master);

 private:
  OptimizerConfig config_;
  double lr_;
  std::vector<at::Tensor> params_;  // both groups, for the norm
  std::vector<std::string> decay_names_;
  std::vector<std::string> no_decay_names_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
  std::map<const void*, at::Tensor> masters_;  // by TensorImpl of reduced-precision parameters
};

}  // namespace dhp

#endif  // DHP_WORKER_OPTIM_OPTIMIZER_H_
