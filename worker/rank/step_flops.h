// FLOPs of one Qwen2.5-VL training step, counted analytically from the config and the batch's
// shapes (a deterministic counter: what MFU and the model benchmark divide by). No LibTorch.
//
// Conventions (those of Megatron-LM's and PaLM's MFU accounting): a matmul of [m, k] x [k, n]
// costs 2*m*k*n FLOPs; only matmuls count (norms, activations, rotary, softmax, bias adds and the
// embedding lookup are left out, a few % at most); backward costs twice the forward, so a
// training step is 3 x forward (activation-checkpointing recomputation is not counted: these
// are model FLOPs, not hardware FLOPs).
//
// Forward FLOPs, with Hv/Iv the vision hidden/intermediate sizes, D = 3*2*14*14 = 1176 the patch
// size, Mv = 4*Hv the merged width, H/I the text hidden/intermediate, q = heads*head_dim,
// kv = kv_heads*head_dim, V the vocabulary:
//   vision, per patch:        2*D*Hv (patch embed)
//                           + depth * (2*Hv*3Hv + 2*Hv*Hv + 3 * 2*Hv*Iv)   (qkv, proj, gated MLP)
//   vision, per merged token: 2*Mv*Mv + 2*Mv*out_hidden                      (patch merger)
//   vision attention:         per block, per segment of length L: 4*L^2*Hv  (QK^T and PV)
//                             window blocks: the window segments; full blocks: one per frame
//   text, per token:          layers * (2*H*q + 2 * 2*H*kv + 2*q*H + 3 * 2*H*I) + 2*H*V
//   text attention:           per layer, per packed sample of length L: 4*L^2*q. Causal attention
//                             is counted as the full L x L (PaLM's convention; what unfused
//                             kernels compute; flash kernels skip about half).
//
// Thread-safety: pure functions.
#ifndef DHP_WORKER_RANK_STEP_FLOPS_H_
#define DHP_WORKER_RANK_STEP_FLOPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "worker/model/vision_window.h"

namespace dhp {

struct StepFlops {
  // Forward pass only.
  int64_t vision_linear = 0;
  int64_t vision_attention = 0;
  int64_t text_linear = 0;  // includes the LM head
  int64_t text_attention = 0;

  int64_t forward() const { return vision_linear + vision_attention + text_linear + text_attention; }
  // Forward + backward.
  int64_t training() const { return 3 * forward(); }
};

// `images`: the grids of the step's images; `sample_lengths`: the token count of every packed
// sample of the step (over all packed sequences). InvalidArgument for grids the vision tower
// rejects (see MakeVisionWindowPlan) or non-positive lengths.
absl::StatusOr<StepFlops> CountStepFlops(const ModelPreset& model,
                                         const std::vector<GridThw>& images,
                                         const std::vector<int64_t>& sample_lengths);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_STEP_FLOPS_H_
