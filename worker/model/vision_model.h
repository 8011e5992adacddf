// The Qwen2.5-VL vision tower: patch embedding, 2-D rotary, window/full-attention blocks, and
// the 2x2 patch merger to the text hidden size.
//
// VisionTransformer is a separate module from the text decoder (the two run in different
// process groups). Its parameter names are the checkpoint's without the `visual.` prefix
// (patch_embed.proj.weight, blocks.N...., merger.ln_q.weight, merger.mlp.{0,2}.{weight,bias});
// registered under Qwen2_5_VL they get it. The forward steps are public so that a
// sequence-parallel tower can split the work between them.
//
// Construction: VisionTransformer(config, make) holds exactly the tensors the ParamFactory
// `make` (param_factory.h) yields for those names, in their dtype and on their device, and
// allocates no other parameter: WholeTensors(source, "visual.") for a replicated (Ulysses)
// tower, a tensor-parallel rank's slices for vision TP (vision_tp.h). VisionTransformer(config)
// uses LibTorchDefaultInit(): the values torch::nn modules would have (single-rank models, which
// then take the run's initialisation, param_init.h, or a checkpoint). Not thread-safe.
#ifndef DHP_WORKER_MODEL_VISION_MODEL_H_
#define DHP_WORKER_MODEL_VISION_MODEL_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <utility>
#include <vector>

#include "common/model_presets.h"
#include "worker/model/layers.h"
#include "worker/model/param_factory.h"
#include "worker/model/vision_block.h"
#include "worker/model/vision_window.h"

namespace dhp {

// The patch embedding's Conv3d: kernel = stride = (temporal_patch, patch, patch), no bias; its
// "weight" [hidden, C, T, P, P] from a ParamFactory. forward is the convolution itself.
class PatchConv3dImpl : public torch::nn::Module {
 public:
  PatchConv3dImpl(const VisionConfig& config, const ParamFactory& make);
  at::Tensor forward(const at::Tensor& x);  // [N, C, T, P, P] -> [N, hidden, 1, 1, 1]

  at::Tensor weight;  // [hidden, C, T, P, P]
};
TORCH_MODULE(PatchConv3d);

// The Conv3d above computed as a matmul over the flattened patch (C, T, P, P order, as the pixel
// input is laid out).
class VisionPatchEmbedImpl : public torch::nn::Module {
 public:
  VisionPatchEmbedImpl(const VisionConfig& config, const ParamFactory& make);
  at::Tensor forward(const at::Tensor& pixels);  // [N, C*T*P*P] -> [N, hidden]

  PatchConv3d proj{nullptr};  // weight [hidden, C, T, P, P]
};
TORCH_MODULE(VisionPatchEmbed);

// RMSNorm, then each run of merge^2 consecutive patches as one vector -> Linear -> GELU -> Linear.
class PatchMergerImpl : public torch::nn::Module {
 public:
  PatchMergerImpl(const VisionConfig& config, const ParamFactory& make);
  at::Tensor forward(const at::Tensor& x);  // [N, hidden] -> [N/4, out_hidden]

  RmsNorm ln_q{nullptr};
  torch::nn::Sequential mlp{nullptr};  // 0: Dense(4h, 4h), 1: GELU, 2: Dense(4h, out_hidden)

 private:
  int64_t merged_dim_;
};
TORCH_MODULE(PatchMerger);

class VisionTransformerImpl : public torch::nn::Module {
 public:
  explicit VisionTransformerImpl(const VisionConfig& config);
  // Every parameter from `make` (names relative to the tower, e.g. "blocks.0.attn.qkv.weight",
  // asked in named_parameters() order). Throws what `make` throws.
  VisionTransformerImpl(const VisionConfig& config, const ParamFactory& make);

  // pixels: [N, 1176] (images of `grids` concatenated, each in merge-block order)
  // -> [N/4, out_hidden], one embedding per <|image_pad|> token, in input (image) order.
  // Throws c10::Error on grids that do not match the pixels.
  at::Tensor forward(const at::Tensor& pixels, const std::vector<GridThw>& grids);
  at::Tensor ForwardWithPlan(const at::Tensor& pixels, const VisionWindowPlan& plan);

  // Steps of ForwardWithPlan.
  // Rotary tables for the patches in window order: (cos, sin), each [N, head_dim] fp32.
  std::pair<at::Tensor, at::Tensor> RotaryCosSin(const VisionWindowPlan& plan,
                                                 const at::Device& device) const;
  // [N, hidden] in input order -> window order (units of 4 patches move together).
  at::Tensor ToWindowOrder(const at::Tensor& x, const VisionWindowPlan& plan) const;
  // Runs every block; x, cos, sin in window order. Block i attends within
  // plan.cu_seqlens when i is a full-attention block, plan.cu_window_seqlens otherwise.
  at::Tensor RunBlocks(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       const VisionWindowPlan& plan);
  // [N/4, out] in window order -> input order.
  at::Tensor FromWindowOrder(const at::Tensor& merged, const VisionWindowPlan& plan) const;

  bool IsFullAttentionBlock(int index) const;
  const VisionConfig& config() const { return config_; }
  VisionBlock block(int index) const { return VisionBlock(blocks->ptr<VisionBlockImpl>(index)); }

  // Recompute each block in backward instead of keeping its activations.
  void set_gradient_checkpointing(bool on) { checkpointing_ = on; }

  VisionPatchEmbed patch_embed{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  PatchMerger merger{nullptr};

 private:
  VisionConfig config_;
  bool checkpointing_ = false;
};
TORCH_MODULE(VisionTransformer);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_VISION_MODEL_H_
