#include "worker/model/vision_model.h"

#include <torch/nn/modules/activation.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/model/checkpoint.h"
#include "worker/model/model_config.h"

namespace dhp {
namespace {

at::Tensor HostLongs(const std::vector<int64_t>& v, const at::Device& device) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
}

}  // namespace

PatchConv3dImpl::PatchConv3dImpl(const VisionConfig& c, const ParamFactory& make) {
  weight = register_parameter(
      "weight", MakeParam(make, "weight",
                          {c.hidden_size, c.in_channels, c.temporal_patch_size, c.patch_size,
                           c.patch_size},
                          ParamRole::kLinearWeight));
}

at::Tensor PatchConv3dImpl::forward(const at::Tensor& x) {
  const at::IntArrayRef kernel = weight.sizes().slice(2);  // (T, P, P)
  return at::conv3d(x, weight, /*bias=*/{}, /*stride=*/kernel);
}

VisionPatchEmbedImpl::VisionPatchEmbedImpl(const VisionConfig& c, const ParamFactory& make) {
  proj = register_module("proj", PatchConv3d(c, ScopedFactory(make, "proj.")));
}

at::Tensor VisionPatchEmbedImpl::forward(const at::Tensor& pixels) {
  const at::Tensor& w = proj->weight;  // [hidden, C, T, P, P]
  TORCH_CHECK_VALUE(pixels.dim() == 2 && pixels.size(1) * w.size(0) == w.numel(),
                    "patch embed: pixels must be [N, ", w.numel() / w.size(0), "], got ",
                    pixels.sizes());
  return at::matmul(pixels.to(w.scalar_type()), w.view({w.size(0), -1}).t());  // [N, hidden]
}

PatchMergerImpl::PatchMergerImpl(const VisionConfig& c, const ParamFactory& make)
    : merged_dim_(int64_t{c.hidden_size} * MergeUnit(c)) {
  ln_q = register_module("ln_q", RmsNorm(c.hidden_size, 1e-6, ScopedFactory(make, "ln_q.")));
  // Built one by one: the factory is asked in registration order (a function call's arguments
  // are evaluated in no set order).
  const int64_t m = merged_dim_;
  Dense fc1(m, m, /*bias=*/true, ScopedFactory(make, "mlp.0."));
  Dense fc2(m, c.out_hidden_size, /*bias=*/true, ScopedFactory(make, "mlp.2."));
  mlp = register_module("mlp", torch::nn::Sequential(fc1, torch::nn::GELU(), fc2));
}

at::Tensor PatchMergerImpl::forward(const at::Tensor& x) {
  // Explicit row count: an empty run (N = 0) is valid under sequence parallelism.
  return mlp->forward(ln_q(x).reshape({x.numel() / merged_dim_, merged_dim_}));  // [N/4, out]
}

VisionTransformerImpl::VisionTransformerImpl(const VisionConfig& config)
    : VisionTransformerImpl(config, LibTorchDefaultInit()) {}

VisionTransformerImpl::VisionTransformerImpl(const VisionConfig& config, const ParamFactory& make)
    : config_(config) {
  patch_embed =
      register_module("patch_embed", VisionPatchEmbed(config, ScopedFactory(make, "patch_embed.")));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < config.depth; ++i) {
    blocks->push_back(VisionBlock(config, ScopedFactory(make, absl::StrCat("blocks.", i, "."))));
  }
  merger = register_module("merger", PatchMerger(config, ScopedFactory(make, "merger.")));
}

bool VisionTransformerImpl::IsFullAttentionBlock(int index) const {
  const auto& full = config_.fullatt_block_indexes;
  return std::find(full.begin(), full.end(), index) != full.end();
}

std::pair<at::Tensor, at::Tensor> VisionTransformerImpl::RotaryCosSin(
    const VisionWindowPlan& plan, const at::Device& device) const {
  // inv_freq over half the head dim: rows use the first half, columns the second.
  const int64_t dim = VisionHeadDim(config_) / 2;
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor inv_freq = 1.0 / at::pow(10000.0, at::arange(0, dim, 2, f32) / double(dim));
  at::Tensor table = at::outer(at::arange(plan.max_grid_side, f32), inv_freq);  // [side, dim/2]
  std::vector<int64_t> flat;
  flat.reserve(plan.rope_pos.size() * 2);
  for (const auto& rc : plan.rope_pos) flat.insert(flat.end(), rc.begin(), rc.end());
  at::Tensor pos = HostLongs(flat, device);  // [N*2]: row, col, row, col, ...
  at::Tensor freqs = table.index_select(0, pos).view({plan.num_patches, dim});  // [N, dim]
  at::Tensor emb = at::cat({freqs, freqs}, -1);                                 // [N, head_dim]
  return {emb.cos(), emb.sin()};
}

at::Tensor VisionTransformerImpl::ToWindowOrder(const at::Tensor& x,
                                                const VisionWindowPlan& plan) const {
  const int64_t unit = MergeUnit(config_);
  at::Tensor index = HostLongs(plan.window_index, x.device());
  return x.reshape({plan.num_units, unit, -1}).index_select(0, index).view({plan.num_patches, -1});
}

at::Tensor VisionTransformerImpl::FromWindowOrder(const at::Tensor& merged,
                                                  const VisionWindowPlan& plan) const {
  return merged.index_select(0, HostLongs(plan.reverse_index, merged.device()));
}

at::Tensor VisionTransformerImpl::RunBlocks(const at::Tensor& x, const at::Tensor& cos,
                                            const at::Tensor& sin, const VisionWindowPlan& plan) {
  at::Tensor h = x;
  for (int i = 0; i < config_.depth; ++i) {
    VisionBlock blk = block(i);
    const std::vector<int64_t>& segs =
        IsFullAttentionBlock(i) ? plan.cu_seqlens : plan.cu_window_seqlens;
    if (checkpointing_ && is_training()) {
      h = CheckpointedCall(
          [blk, cos, sin, segs](const at::Tensor& in) mutable {
            return blk->forward(in, cos, sin, segs);
          },
          h);
    } else {
      h = blk->forward(h, cos, sin, segs);
    }
  }
  return h;
}

at::Tensor VisionTransformerImpl::ForwardWithPlan(const at::Tensor& pixels,
                                                  const VisionWindowPlan& plan) {
  TORCH_CHECK_VALUE(pixels.size(0) == plan.num_patches, "vision: pixels have ", pixels.size(0),
                    " patches but the image grids sum to ", plan.num_patches);
  at::Tensor x = patch_embed(pixels);                     // [N, hidden], input order
  auto [cos, sin] = RotaryCosSin(plan, x.device());       // [N, head_dim], window order
  x = RunBlocks(ToWindowOrder(x, plan), cos, sin, plan);  // [N, hidden], window order
  return FromWindowOrder(merger(x), plan);                // [N/4, out], input order
}

at::Tensor VisionTransformerImpl::forward(const at::Tensor& pixels,
                                          const std::vector<GridThw>& grids) {
  absl::StatusOr<VisionWindowPlan> plan = MakeVisionWindowPlan(grids, config_);
  TORCH_CHECK_VALUE(plan.ok(), "vision: ", std::string(plan.status().message()));
  return ForwardWithPlan(pixels, *plan);
}

}  // namespace dhp
