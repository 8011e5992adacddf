// TrainingStage: what every stage of the distributed step (vision_stage.h, text_stage.h) does
// after its forward and backward passes, the same for any parallel strategy: reduce its
// gradients over its groups, give its share of the global gradient norm, update its parameters,
// and hold its part of the rank's checkpoint state. DistTrainer (dist_step.h) calls the stages in
// a fixed order (vision, then text), so every rank issues the collectives in the same order.
//
// StateReader: the checkpoint tensors of one DistTrainer::LoadState, taken by name and shape by
// each stage in turn. It collects what is missing, unexpected or of another shape into one
// error message; a stage's TakeState returns the action that installs what it took, run only
// when every stage's tensors were found valid (so that a refused checkpoint changes nothing).
//
// Errors: Statuses; LibTorch errors are caught by DistTrainer at its boundary. Thread-safety:
// not thread-safe; the rank's training thread. Process groups are borrowed.
#ifndef DHP_WORKER_RANK_STAGE_H_
#define DHP_WORKER_RANK_STAGE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/optim/optimizer.h"

namespace dhp {

// How a stage trains (DistTrainerOptions split per stage).
struct StageOptions {
  OptimizerConfig optimizer;  // grad_clip_norm is applied by the caller (global norm)
  bool activation_checkpointing = false;  // recompute the stage's blocks in backward
  // The stage's parameters, activations and gradients (the source's slices are converted, one
  // at a time). bf16: fp32 master weights and Adam moments beside them (mixed precision).
  at::ScalarType dtype = at::kFloat;
  // The dtype gradients are summed in over the stage's data-parallel / ZeRO groups: fp32
  // (bf16 gradients are converted for the collective and back) or the gradients' own.
  at::ScalarType grad_reduce_dtype = at::kFloat;
  // Gradient accumulation in fp32 (Megatron-LM's main_grad; issue 13 §4). When `dtype` is not
  // fp32 and a step has more than one micro-batch, BeginGradAccumulation gives every trainable
  // parameter, before the step's first forward, an fp32 zero tensor as its gradient: backward's
  // AccumulateGrad then adds each fresh bf16 gradient into it in place (`grad += new_grad`, fp32
  // += bf16, in both LibTorch 1.13 and 2.x), so a bf16 gradient lives only while its parameter's
  // accumulation runs and sums of micro-batches are never rounded to 8 mantissa bits. The
  // reductions (FinishTpGradients, the text DP all-reduce, ZeRO-1's flattening), the norm,
  // clipping and the optimizer read the fp32 gradients as they are (no bf16 round trip, and the
  // optimizer needs no fp32 copy of them). The stage's Step frees them (gradients set to
  // undefined, as every step): nothing is held between steps. Keeping them would save one
  // caching-allocator block per step but hold them through checkpoints and one-micro-batch
  // steps; allocating after the first forward would not lower the peak, which the second
  // micro-batch's forward reaches with them resident anyway. A parameter no micro-batch reaches
  // has zero gradients instead of none (every step reaches every text parameter, and ZeRO-1
  // reads a missing vision gradient as zeros anyway). With one micro-batch (or fp32 parameters,
  // or this false) nothing is allocated: bf16 gradients as before, bit-identical.
  // Cost per reduced-precision parameter element: 4 bytes of gradient instead of 2, from the
  // start of a multi-micro-batch step to its optimizer update, plus one parameter's transient
  // bf16 gradient (at 32B at most a vocabulary shard: 19008 x 5120 x 2 B = 195 MB).
  // Qwen2.5-VL-32B, text TP 8 + vision SP 8 collocated: text 4,096,062,464 shard elements x 4 B
  // = 16.4 GB (8.2 GB in bf16) plus the replicated vision tower 688,841,984 x 4 B = 2.8 GB
  // (1.4 GB): 19.1 GB per rank, 9.6 GB more than bf16 gradients (common/memory_plan.h).
  bool fp32_grad_accumulation = true;
};

// True when a stage with `options` accumulates a step of `micro_batches` in fp32 (see above).
bool AccumulatesGradientsInFp32(const StageOptions& options, int64_t micro_batches);

// Before the first backward of a step of `micro_batches`: when AccumulatesGradientsInFp32, sets
// the gradient of every parameter of `params` that requires grad and is not fp32 to fp32 zeros
// (a gradient already there, e.g. left by a failed step, is converted instead); else nothing.
void BeginGradAccumulation(const StageOptions& options, int64_t micro_batches,
                           const std::vector<std::pair<std::string, at::Tensor>>& params);

class StateReader {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

  // A name given twice is recorded as unexpected ("name (twice)"); the first copy is kept.
  explicit StateReader(const NamedTensors& state);

  // Takes the required tensor `name` of shape `sizes`; undefined (and recorded as missing or of
  // another shape) when it is absent or shaped otherwise.
  at::Tensor Take(const std::string& name, at::IntArrayRef sizes);
  // What no one took yet, for readers of their own (optimizer_state.h TakeAdamWState).
  std::map<std::string, at::Tensor>* rest() { return &rest_; }
  // A problem found by such a reader, appended to the message after the lists.
  void AddProblem(std::string problem) { problems_.push_back(std::move(problem)); }

  // Once every stage has taken its tensors: OK, or InvalidArgument naming up to 5 tensors of
  // each kind (missing, unexpected = left untaken, of another shape) and the problems, for the
  // rank `who` (e.g. "world rank 3 of layout vision 2 x text 2 x dp 1, collocated").
  absl::Status Finish(const std::string& who);

 private:
  std::map<std::string, at::Tensor> rest_;
  std::vector<std::string> missing_, unexpected_, wrong_, problems_;
};

class TrainingStage {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
  // Installs the tensors a TakeState took (see the file comment).
  using StateLoad = std::function<absl::Status()>;

  virtual ~TrainingStage() = default;

  // Before the step's first forward: the step has `micro_batches` >= 1 micro-batches
  // (BeginGradAccumulation on the stage's parameters). Local.
  virtual void BeginStep(int64_t micro_batches) = 0;

  // Collective over the stage's groups: the gradients of this step's backward passes made
  // complete (summed over sequence / tensor partials and data-parallel replicas).
  virtual absl::Status ReduceGradients() = 0;
  // This rank's share of the squared L2 norm of the full model's gradient (after
  // ReduceGradients): summed over the world, every element of the stage counts once.
  virtual absl::StatusOr<double> GradSquaredNormShare() = 0;
  // Collective: gradients *= clip_coef, one optimizer update at learning rate `lr`, gradients
  // cleared.
  virtual absl::Status Step(double lr, double clip_coef) = 0;

  // This rank's trainable tensors by checkpoint name (full tensors or shards; live).
  virtual NamedTensors Parameters() const = 0;
  // Appends this rank's parameters and optimizer state, as aliases (DistTrainer::LiveState).
  virtual void AppendLiveState(NamedTensors* out) = 0;
  // Takes this stage's tensors out of `reader` (see the file comment).
  virtual StateLoad TakeState(StateReader& reader) = 0;

  // Collective: the stage's full HF-shaped parameters / gradients (after ReduceGradients, before
  // clipping), copies.
  virtual absl::StatusOr<NamedTensors> FullParameters() = 0;
  virtual absl::StatusOr<NamedTensors> FullGradients() = 0;

  // The device of the stage's parameters.
  virtual at::Device device() const = 0;
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_STAGE_H_
