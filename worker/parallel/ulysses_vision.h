// UlyssesVisionTransformer: the Qwen2.5-VL vision tower under Ulysses sequence parallelism over
// one SP group (the reference design's vision layout; see ../shared/reference/prior-art.md).
//
// Every rank holds the WHOLE (replicated) VisionTransformer and the whole batch of pixels. One
// forward on rank r of P (shapes: N patches, S_r = patches of this rank's run, U = N/4 merged
// tokens, U_r = S_r/4, hidden h = H*D):
//   1. window plan and split (vision_sequence_split.h), replicated on every rank (cheap, host);
//   2. the rank's run of whole windows, in window order: its pixel rows are gathered directly
//      ([N, 1176] -> [S_r, 1176]) and patch-embedded ([S_r, h]); only the local rows are
//      embedded, which is numerically the replicated embedding sliced, at 1/P of the cost;
//      rotary tables are built for the whole sequence and sliced ([S_r, D]);
//   3. window-attention blocks: purely local (attention within the run's whole windows);
//   4. full-attention blocks: q, k, v [S_r, H, D] -> one fused all-to-all (scatter heads,
//      gather sequence; uneven S_r) -> [N, H/P, D] -> attention within the frames of the whole
//      sequence (frames may span ranks) -> inverse all-to-all -> [S_r, H, D] -> proj, MLP;
//   5. merger on the local run ([S_r, h] -> [U_r, out]; runs hold whole 2x2 units) and an
//      all-gather of the merged tokens in window order ([U, out]), un-permuted to input order.
//      Gathering AFTER the merger moves out/(4h) of the bytes of gathering before it (0.7 for
//      the 7B tower) and splits the merger's work. Backward of the gather: see
//      UlyssesOutputGrad (vision_comm_volume.h).
// The output [U, out] is identical on every rank (one row per <|image_pad|> token, input order).
//
// Gradients: after backward, each rank's parameter gradients are PARTIAL (the contribution of
// its own patches). The caller must SUM them over the SP group before the optimizer step
// (AllReduceGradients below, or ZeRO-1's reduce-scatter over the vision group); parameters a rank
// did not touch (e.g. an empty run) may have undefined gradients, which count as zeros.
// Communication per step: vision_comm_volume.h (checked exactly by the tests).
//
// Requirements: the SP degree divides the vision heads (Create returns InvalidArgument naming
// both otherwise). Every rank must call Forward with the same pixels, plan and split, and run
// backward (collectives inside autograd); see communicator.h for ordering.
//
// Errors: Create returns a Status; Forward and backward throw c10::Error (LibTorch style, as
// VisionTransformer does) — call them inside the rank's CatchTorch boundary.
// Thread-safety: not thread-safe; one rank's training thread. The Communicator is borrowed and
// must outlive this object and every backward pass through its outputs.
#ifndef DHP_WORKER_PARALLEL_ULYSSES_VISION_H_
#define DHP_WORKER_PARALLEL_ULYSSES_VISION_H_

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/model/vision_model.h"
#include "worker/parallel/vision_comm_volume.h"
#include "worker/parallel/vision_sequence_split.h"

namespace dhp {

struct UlyssesVisionOptions {
  UlyssesOutputGrad output_grad = UlyssesOutputGrad::kReplicated;
};

// OK when `sp` >= 1 divides the vision heads; otherwise InvalidArgument, e.g.
// "vision sequence-parallel degree 3 must divide the 16 vision attention heads (try 1, 2, 4, 8
// or 16)".
absl::Status ValidateVisionSp(const VisionConfig& config, int sp);

class UlyssesVisionTransformer {
 public:
  // `model` is this rank's full replica (same values on every rank of `comm`: same seed or same
  // checkpoint); it is shared, not copied (module holders are shared pointers).
  static absl::StatusOr<std::unique_ptr<UlyssesVisionTransformer>> Create(
      VisionTransformer model, comm::Communicator& comm, UlyssesVisionOptions options = {});

  // The split of `plan` over this group (the same on every rank).
  absl::StatusOr<VisionSequenceSplit> Split(const VisionWindowPlan& plan) const;

  // pixels: [N, 1176] (the whole batch, in input order, identical on every rank).
  // -> [N/4, out_hidden] in input order, identical on every rank.
  at::Tensor Forward(const at::Tensor& pixels, const VisionWindowPlan& plan,
                     const VisionSequenceSplit& split);
  // Steps 2-5 without the all-gather: this rank's merged tokens, [U_r, out] in WINDOW order
  // (rows split.UnitOffset(rank) .. + U_r of the gathered window-order output; in input order,
  // the rows OwnedMergedRows(plan, split, rank)). Still collective (full-attention blocks).
  // For a hand-off that sends each text rank only what it needs; its backward takes the
  // gradient of these rows only, complete (no reduction).
  at::Tensor ForwardLocal(const at::Tensor& pixels, const VisionWindowPlan& plan,
                          const VisionSequenceSplit& split);

  // Sums every parameter's gradient over the SP group in place (one flattened all-reduce;
  // undefined gradients count as zeros and become defined). Plain DDP-style alternative to
  // ZeRO-1's reduce-scatter; used by the tests.
  absl::Status AllReduceGradients();

  VisionTransformer& model() { return model_; }
  comm::Communicator& comm() { return comm_; }
  const UlyssesVisionOptions& options() const { return options_; }

 private:
  UlyssesVisionTransformer(VisionTransformer model, comm::Communicator& comm,
                           UlyssesVisionOptions options);

  // One full-attention block on the local run: x [S_r, h] -> [S_r, h].
  at::Tensor FullAttentionBlock(VisionBlock& block, const at::Tensor& x, const at::Tensor& cos,
                                const at::Tensor& sin, const VisionSequenceSplit& split);

  VisionTransformer model_;
  comm::Communicator& comm_;
  UlyssesVisionOptions options_;
};

}  // namespace dhp

#endif  // DHP_WORKER_PARALLEL_ULYSSES_VISION_H_
