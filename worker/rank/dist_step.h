// DistTrainer: one rank's part of the distributed Qwen2.5-VL training step with disaggregated
// hybrid parallelism: a vision stage (Ulysses sequence parallelism or vision tensor parallelism,
// ZeRO-1 AdamW) and a text stage (Megatron tensor parallelism, AdamW on its shards), each with
// its own groups, data parallelism over replicas, and the hand-off between them.
// See ../../shared/DESIGN.md ("One training step").
//
// The stages (each built from the TensorSource by its factory, one strategy per file):
//   vision_stage.h  Ulysses SP + ZeRO-1 over "vision", or vision TP + ZeRO-1 over "vision.dp<i>"
//                   (Layout::vision_parallelism);
//   text_stage.h    TP decoder + AdamW on its shards, DP sum over "text.dp<j>".
//
// One Step (every rank of the world calls it with the same arguments) on the global batch:
// micro_batches[d][k] is micro-batch k of replica d, one packed sequence each; every replica has
// the same number n >= 1 of them (gradient accumulation; n = 1: none).
//   0. the labelled tokens of all n micro-batches are counted (text ranks, before any forward)
//      and summed over the text DP group: the GLOBAL count;
//   for each micro-batch k, in order:
//   1. vision forward (vision ranks of replica d, on micro-batch (d, k)): [M_dk, H] image
//      embeddings, identical on every rank of the replica;
//   2. hand-off of the embeddings: text rank (d, j) <- vision rank (d, j mod Sv) (handoff.h: in
//      memory when both are one process, else Send/Recv over the `handoff` communicator, tag 0);
//   3. text forward + loss: embeddings with the image rows scattered in; backward of the loss
//      sum / GLOBAL count, so that the accumulated gradients are those of the exact mean over
//      the labelled tokens of the whole global batch;
//   4. hand-off of the gradients: vision rank (d, i) <- d(loss)/d(image embeddings) of text rank
//      (d, i mod Tt), the same function (tag 1);
//   5. vision backward (gradients accumulate over the micro-batches);
//   then, once per step:
//   6. the reported loss: the loss sums of all micro-batches summed over the text DP group,
//      divided by the global count; reductions, each stage over its groups (vision: ZeRO-1
//      reduce-scatter; text: FinishTpGradients + DP all-reduce);
//   7. global clipping: ONE all-reduce over "world" of the stages' squared-norm shares (each
//      element of the full model counted once);
//   8. optimizer steps with the learning rate of the schedule and the clip coefficient.
// The result is that of one rank training on all the micro-batches of all replicas at once (up
// to summation order). Memory: gradients are accumulated in place (the size of one step's
// gradients, as without accumulation; fp32 instead of bf16 when a bf16 stage runs n > 1:
// StageOptions::fp32_grad_accumulation in stage.h); activations live for one micro-batch at a
// time.
//
// Errors: Statuses (LibTorch errors are caught at this boundary). Thread-safety: not thread-safe;
// the rank's training thread. ProcessGroups and the handoff communicator are borrowed.
#ifndef DHP_WORKER_RANK_DIST_STEP_H_
#define DHP_WORKER_RANK_DIST_STEP_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "worker/comm/communicator.h"
#include "worker/comm/process_groups.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/tensor_source.h"
#include "worker/optim/lr_schedule.h"
#include "worker/optim/optimizer.h"
#include "worker/parallel/zero1.h"
#include "worker/rank/handoff.h"
#include "worker/rank/stage.h"
#include "worker/rank/text_stage.h"
#include "worker/rank/vision_stage.h"

namespace dhp {

struct DistTrainerOptions {
  OptimizerConfig optimizer;  // grad_clip_norm is the GLOBAL norm over both stages
  LrScheduleConfig schedule;
  bool text_activation_checkpointing = false;  // recompute the TP decoder layers in backward
  bool vision_activation_checkpointing = false;  // recompute the vision blocks in backward
  // Each stage's parameter / activation / gradient dtype (StageOptions::dtype): fp32, or bf16
  // with fp32 master weights and Adam moments. The hand-off carries the vision dtype.
  at::ScalarType vision_dtype = at::kFloat;
  at::ScalarType text_dtype = at::kFloat;
  at::ScalarType grad_reduce_dtype = at::kFloat;  // of every gradient reduction
  // Gradients of a reduced-precision stage summed over a step's micro-batches in fp32
  // (StageOptions::fp32_grad_accumulation); false: in the stage's dtype (the spec's
  // training.grad_accum_dtype: bf16).
  bool fp32_grad_accumulation = true;
};

struct DistStepResult {
  double loss = 0;       // global mean loss; valid on text ranks (0 on vision-only ranks)
  double grad_norm = 0;  // global L2 norm before clipping, on every rank
  double lr = 0;
  // Wall time of the step's phases (see the file comment), summed over the micro-batches:
  // forward passes, backward passes, hand-offs, token-count and loss all-reduces and gradient
  // reductions (comm), optimizer updates.
  double forward_s = 0, backward_s = 0, comm_s = 0, optimizer_s = 0;
  // Filled when Step(..., gather_grads = true): full HF-shaped gradients before clipping,
  // vision ones on vision ranks ("visual.*"), text ones on text ranks ("model.*", "lm_head.*");
  // in the stage's dtype, or fp32 when they were accumulated in fp32 (vision ones: fp32).
  std::vector<std::pair<std::string, at::Tensor>> grads;
};

class DistTrainer {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

  // Shard-first: builds only what this rank's roles train, reading only those slices from
  // `source` (full HF names and shapes; param_init.h's InitTensorSource, a checkpoint, or
  // ModuleTensorSource of a model in memory), on the source's device and in its dtype:
  //   Ulysses vision rank:  the whole vision tower (replicated over the SP group by design);
  //   vision TP rank:       its shards of the tower;
  //   text rank:            its TP shards (vocab-parallel embedding and LM head, q/o heads,
  //                         k/v heads with replication, MLP columns) and the replicated norms.
  // A rank without a vision role reads no vision tensor, one without a text role no text tensor.
  // `handoff`: a communicator over every world rank in world-rank order (group name "handoff");
  // may be null when no hand-off needs the wire (Layout::HandOffInMemory()).
  static absl::StatusOr<std::unique_ptr<DistTrainer>> Create(const ModelPreset& preset,
                                                             const TensorSource& source,
                                                             comm::ProcessGroups& groups,
                                                             comm::Communicator* handoff,
                                                             const DistTrainerOptions& options);
  // The same from a full single-rank model in memory (tests): ModuleTensorSource(*model).
  static absl::StatusOr<std::unique_ptr<DistTrainer>> Create(const ModelPreset& preset,
                                                             Qwen2_5_VL model,
                                                             comm::ProcessGroups& groups,
                                                             comm::Communicator* handoff,
                                                             const DistTrainerOptions& options);

  // One training step on the global batch (see the file comment); collective over the world.
  // micro_batches: [dp][n], n >= 1 micro-batches per replica.
  absl::StatusOr<DistStepResult> Step(const std::vector<std::vector<PackedBatch>>& micro_batches,
                                      bool gather_grads = false);
  // The same with one micro-batch per replica (batches.size() == dp).
  absl::StatusOr<DistStepResult> Step(const std::vector<PackedBatch>& batches,
                                      bool gather_grads = false);

  // Full HF-shaped parameters of this rank's roles (collective within the text TP group).
  absl::StatusOr<NamedTensors> FullParameters();

  // Everything this rank needs to continue bit-identically, for its checkpoint shard (copies,
  // CPU or the model's device):
  //   "trainer.step"                    [1] int64, steps done
  //   "visual.*"                        vision parameters: the replica's full tensors (Ulysses)
  //                                     or this rank's shards (vision TP); vision ranks
  //   "optim.vision.{master,exp_avg,exp_avg_sq}"  ZeRO-1 partition [P] fp32; vision ranks
  //   "optim.vision.step"               [1] int64
  //   "model.*", "lm_head.*"            this rank's text TP shards; text ranks
  //   "optim.text.<param>.{exp_avg,exp_avg_sq,step}"  AdamW state of each text shard that has
  //                                     been updated (optimizer_state.h)
  //   "optim.text.<param>.master"       fp32 master of each text shard when text_dtype is bf16
  // Local: no communication.
  absl::StatusOr<NamedTensors> State();
  // The same names and values without copies: aliases of the live parameters and optimizer
  // state (only "trainer.step" and "optim.vision.step" are fresh), which the next Step or
  // LoadState changes. For a checkpoint written before training goes on, or snapshotted
  // first (rank_checkpoint.h SnapshotToHost: one copy, straight to host memory).
  absl::StatusOr<NamedTensors> LiveState();

  // Restores a State() of the same rank of the same layout. Every name must be known and every
  // required one present with this rank's shape; otherwise InvalidArgument naming the tensors
  // (up to 5 of each kind: missing, unexpected, wrong shape, e.g. a checkpoint of another
  // layout or another rank) and nothing is changed. Local: no communication.
  absl::Status LoadState(const NamedTensors& state);

  // ZeRO-1 optimizer of the vision stage (null on text-only ranks).
  const Zero1AdamW* vision_optimizer() const { return vision_ ? vision_->zero1() : nullptr; }
  int64_t steps_done() const { return step_; }

 private:
  // Wall time per phase of a step.
  class PhaseClock;

  DistTrainer(const ModelPreset& preset, comm::ProcessGroups& groups,
              comm::Communicator* handoff, const DistTrainerOptions& options);

  using MicroBatches = std::vector<std::vector<PackedBatch>>;  // [dp][n]

  absl::StatusOr<DistStepResult> StepImpl(const MicroBatches& micro_batches, bool gather_grads);
  // Step 0 on a text rank: the labelled tokens of this replica's micro-batches, summed over the
  // text DP group.
  absl::StatusOr<double> GlobalLabelledTokens(const std::vector<PackedBatch>& mine);
  // Steps 1-5 for micro-batch k of every replica (`batches`, one per replica); adds this text
  // rank's loss sum to `loss_sum` ([] fp64).
  absl::Status MicroStep(const std::vector<PackedBatch>& batches, double global_count,
                         PhaseClock& clock, DistStepResult* result, at::Tensor* loss_sum);
  // Steps 6-7: the stages' reductions and the global gradient norm.
  absl::StatusOr<double> ReduceGradients();
  // The stages this rank hosts, vision first (the order of every stage-wise collective).
  std::vector<TrainingStage*> Stages() const;
  HandOffRoute Route() const;
  absl::Status LoadStateImpl(const NamedTensors& state);

  ModelPreset preset_;
  comm::ProcessGroups& groups_;
  comm::Communicator* handoff_;
  DistTrainerOptions options_;
  int64_t step_ = 0;
  at::Device device_ = at::kCPU;  // of the model's parameters (hand-off receive buffers)
  std::unique_ptr<VisionStage> vision_;  // vision ranks
  std::unique_ptr<TextStage> text_;      // text ranks
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_DIST_STEP_H_
