// Zero1AdamW: AdamW with its state sharded over one process group (ZeRO stage 1), for the
// vision stage (group = vision SP x dp ranks, all holding the same full parameters).
//
// Layout. The trainable parameters (named_parameters() order, those with requires_grad) are
// flattened into one buffer of F elements, padded with zeros to N * P (P = ceil(F / N), N = group
// size); rank r owns elements [r*P, (r+1)*P) ("its partition"). Only the partition has optimizer
// state: fp32 master weights, exp_avg (m) and exp_avg_sq (v), 3 * P * 4 bytes per rank, i.e. 1/N
// of a replicated AdamW's state up to the padding (state_bytes()).
//
// One step (every rank of the group, same order):
//   ReduceScatterGradients()   the flattened gradients (undefined = zeros; in the reduce dtype,
//                              fp32 by default, on the wire) are
//                              reduce-scattered (SUM) so this rank holds the group-summed gradient
//                              of its partition. The summed gradients are then exact for Ulysses
//                              SP (partial per rank) plus data parallelism when the loss was
//                              divided by the GLOBAL token count.
//   PartialGradSquaredNorm()   fp64 squared L2 norm of this rank's partition: summing it over the
//                              group (or over the world together with the text stage's share)
//                              gives the squared norm of the full gradient, each element once.
//   Step(lr, clip_coef)        gradient *= clip_coef; LibTorch AdamW math on the partition
//                              (decoupled decay p *= 1 - lr*wd only where the element belongs to
//                              a decay-group parameter, UsesWeightDecay in worker/optim/optimizer.h;
//                              bias corrections 1 - beta^t); then an all-gather of the updated
//                              partitions re-assembles every rank's full parameters (copied into
//                              the parameter tensors in their dtype). When every parameter has
//                              one reduced-precision dtype (bf16 training) the partitions travel
//                              in it: half the bytes of fp32, the same parameters (rounding
//                              before or after the gather is the same rounding).
// Grouping and hyper-parameters come from OptimizerConfig (worker/optim/optimizer.h); the
// learning rate is passed per step (LearningRateAt of lr_schedule.h); config.grad_clip_norm is
// not applied here: the caller computes the global coefficient (ClipCoefficient) across stages.
//
// Errors: communicator failures come back as Statuses. Thread-safety: not thread-safe (the rank's
// training thread). Parameters and the communicator are borrowed and must outlive this object.
#ifndef DHP_WORKER_PARALLEL_ZERO1_H_
#define DHP_WORKER_PARALLEL_ZERO1_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"
#include "worker/optim/optimizer.h"

namespace dhp {

// torch.nn.utils.clip_grad_norm_'s coefficient for a global norm: max_norm / (norm + 1e-6) when
// max_norm > 0 and norm > max_norm (and finite), else 1.
double ClipCoefficient(double global_norm, double max_norm);

class Zero1AdamW {
 public:
  using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

  // `params` must be identical (names, shapes, values) on every rank of `group`. `norm_weights`
  // (empty: all 1), one per parameter of `params` that requires grad, weighs each parameter's
  // squared gradient in PartialGradSquaredNorm: e.g. 1/T for a parameter replicated over a
  // T-rank tensor-parallel group whose members each run their own Zero1AdamW (vision TP), so that
  // the world sum counts every element of the full model once.
  // `reduce_dtype`: the dtype the gradients are reduce-scattered in (fp32, or bf16 to halve the
  // bytes); the reduced partition is fp32 either way.
  Zero1AdamW(const NamedParams& params, const OptimizerConfig& config, comm::Communicator& group,
             const std::vector<double>& norm_weights = {},
             at::ScalarType reduce_dtype = at::kFloat);

  // Sets every parameter's gradient to undefined (as TrainingOptimizer::ZeroGrad).
  void ZeroGrad();

  // Collective over the group: reduce-scatter of the flattened gradients (see file comment).
  absl::Status ReduceScatterGradients();

  // Squared L2 norm (fp64) of this rank's reduced gradient partition (after
  // ReduceScatterGradients). Local, no communication.
  double PartialGradSquaredNorm() const;

  // Collective: AdamW on the partition with learning rate `lr` after scaling the gradient by
  // `clip_coef`, then all-gather into the parameters.
  absl::Status Step(double lr, double clip_coef = 1.0);

  // This rank's reduced gradient partition [P] fp32 (tests), and the full flat size.
  const at::Tensor& grad_partition() const { return grad_part_; }
  int64_t full_numel() const { return full_numel_; }
  int64_t partition_numel() const { return part_numel_; }
  int64_t step_count() const { return step_; }
  // Bytes of this rank's optimizer state: master + exp_avg + exp_avg_sq.
  int64_t state_bytes() const;

  // This rank's optimizer state, for checkpoints: copies of master, exp_avg and exp_avg_sq
  // ([P] fp32) and the number of steps taken (the bias corrections depend on it).
  struct PartitionState {
    at::Tensor master, exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  PartitionState State() const;
  // The same without copies: the optimizer's own tensors, which its next Step changes.
  PartitionState StateView() const;
  // Restores a State() taken on the same partition (same parameters, group size and rank).
  // InvalidArgument naming the tensor and both sizes when a partition size or dtype differs
  // (e.g. a checkpoint of another layout); nothing is changed then. The parameters themselves
  // are not touched: restore them too (they equal the all-gathered master partitions).
  absl::Status LoadState(const PartitionState& state);
  comm::Communicator& group() { return group_; }
  int group_size() const { return group_.size(); }

 private:
  // Flattened (padded) concatenation of the parameters or their gradients, [N * P] in `dtype`.
  at::Tensor Flatten(bool grads, at::ScalarType dtype) const;

  OptimizerConfig config_;
  comm::Communicator& group_;
  std::vector<at::Tensor> params_;
  int64_t full_numel_ = 0;
  int64_t part_numel_ = 0;
  at::Device device_ = at::kCPU;  // the parameters' device: every buffer is there
  int64_t step_ = 0;
  at::ScalarType reduce_dtype_ = at::kFloat;  // of the gradients' reduce-scatter
  at::ScalarType gather_dtype_ = at::kFloat;  // of the parameters' all-gather
  at::Tensor master_;      // [P] fp32
  at::Tensor exp_avg_;     // [P] fp32
  at::Tensor exp_avg_sq_;  // [P] fp32
  at::Tensor decay_mask_;  // [P] fp32, 1 where the element's parameter decays (not state)
  at::Tensor norm_weight_;  // [P] fp64, per-element weight of the squared norm (not state)
  at::Tensor grad_part_;   // [P] fp32, after ReduceScatterGradients
};

}  // namespace dhp

#endif  // DHP_WORKER_PARALLEL_ZERO1_H_
