#include "worker/parallel/ulysses_vision.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/comm/autograd_collectives.h"
#include "worker/model/attention.h"
#include "worker/model/model_config.h"
#include "worker/model/torch_status.h"

namespace dhp {
namespace {

at::Tensor HostLongs(const std::vector<int64_t>& v, const at::Device& device) {
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
}

}  // namespace

absl::Status ValidateVisionSp(const VisionConfig& config, int sp) {
  if (sp >= 1 && config.num_heads % sp == 0) return absl::OkStatus();
  std::vector<int> ok;
  for (int d = 1; d <= config.num_heads; ++d) {
    if (config.num_heads % d == 0) ok.push_back(d);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("vision sequence-parallel degree ", sp, " must divide the ", config.num_heads,
                   " vision attention heads (try ", absl::StrJoin(ok, ", "), ")"));
}

absl::StatusOr<std::unique_ptr<UlyssesVisionTransformer>> UlyssesVisionTransformer::Create(
    VisionTransformer model, comm::Communicator& comm, UlyssesVisionOptions options) {
  if (model.is_empty()) return absl::InvalidArgumentError("Ulysses vision: no model given");
  if (absl::Status s = ValidateVisionSp(model->config(), comm.size()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", comm.name(), ": ", s.message()));
  }
  return std::unique_ptr<UlyssesVisionTransformer>(
      new UlyssesVisionTransformer(std::move(model), comm, options));
}

UlyssesVisionTransformer::UlyssesVisionTransformer(VisionTransformer model,
                                                   comm::Communicator& comm,
                                                   UlyssesVisionOptions options)
    : model_(std::move(model)), comm_(comm), options_(options) {}

absl::StatusOr<VisionSequenceSplit> UlyssesVisionTransformer::Split(
    const VisionWindowPlan& plan) const {
  return SplitVisionSequence(plan, comm_.size(), MergeUnit(model_->config()));
}

at::Tensor UlyssesVisionTransformer::FullAttentionBlock(VisionBlock& block, const at::Tensor& x,
                                                        const at::Tensor& cos,
                                                        const at::Tensor& sin,
                                                        const VisionSequenceSplit& split) {
  auto [q, k, v] = block->attn->QkvHeads(block->norm1(x), cos, sin);  // [S_r, H, D] each
  at::Tensor qkv = at::stack({q, k, v}, 1);                           // [S_r, 3, H, D]
  // Scatter heads, gather the sequence (runs in rank order = window order).
  at::Tensor full = comm::AllToAllAlongDims(qkv, comm_, /*scatter_dim=*/2, /*gather_dim=*/0, {},
                                            split.patches_per_rank);  // [N, 3, H/P, D]
  at::Tensor o = VarlenAttention(full.select(1, 0), full.select(1, 1), full.select(1, 2),
                                 split.cu_seqlens, /*causal=*/false);  // [N, H/P, D]
  // Inverse: scatter the sequence back to its runs, gather the heads.
  at::Tensor local = comm::AllToAllAlongDims(o, comm_, /*scatter_dim=*/0, /*gather_dim=*/1,
                                             split.patches_per_rank, {});  // [S_r, H, D]
  at::Tensor h = x + block->attn->OutProj(local);                          // [S_r, h]
  return h + block->mlp(block->norm2(h));
}

at::Tensor UlyssesVisionTransformer::ForwardLocal(const at::Tensor& pixels,
                                                  const VisionWindowPlan& plan,
                                                  const VisionSequenceSplit& split) {
  const VisionConfig& c = model_->config();
  TORCH_CHECK_VALUE(pixels.dim() == 2 && pixels.size(0) == plan.num_patches,
                    "Ulysses vision: pixels ", pixels.sizes(), " but the image grids sum to ",
                    plan.num_patches, " patches");
  TORCH_CHECK_VALUE(split.sp == comm_.size() && split.num_patches == plan.num_patches,
                    "Ulysses vision: the split is for ", split.sp, " ranks and ", split.num_patches,
                    " patches; group ", comm_.name(), " has ", comm_.size(), " ranks and the plan ",
                    plan.num_patches, " patches");
  const VisionRankRun& run = split.run(comm_.rank());
  const int64_t unit = MergeUnit(c);
  const int64_t s_r = run.patches();

  // This run's pixel rows in window order: units window_index[begin/4 .. end/4).
  std::vector<int64_t> units(plan.window_index.begin() + run.patch_begin / unit,
                             plan.window_index.begin() + run.patch_end / unit);
  at::Tensor local_pixels = pixels.reshape({plan.num_units, unit, pixels.size(1)})
                                .index_select(0, HostLongs(units, pixels.device()))
                                .view({s_r, pixels.size(1)});        // [S_r, 1176]
  at::Tensor x = model_->patch_embed(local_pixels);                  // [S_r, h]
  auto [cos_all, sin_all] = model_->RotaryCosSin(plan, x.device());  // [N, D], window order
  at::Tensor cos = cos_all.narrow(0, run.patch_begin, s_r);          // [S_r, D]
  at::Tensor sin = sin_all.narrow(0, run.patch_begin, s_r);

  // An empty run attends over one empty segment (VarlenAttention: {} = one segment).
  const std::vector<int64_t> windows = run.empty() ? std::vector<int64_t>{} : run.cu_window_seqlens;
  for (int i = 0; i < c.depth; ++i) {
    VisionBlock blk = model_->block(i);
    if (model_->IsFullAttentionBlock(i)) {
      x = FullAttentionBlock(blk, x, cos, sin, split);
    } else {
      x = blk->forward(x, cos, sin, windows);  // local windows only
    }
  }
  return model_->merger(x);  // [U_r, out], window order
}

at::Tensor UlyssesVisionTransformer::Forward(const at::Tensor& pixels, const VisionWindowPlan& plan,
                                             const VisionSequenceSplit& split) {
  at::Tensor local = ForwardLocal(pixels, plan, split);  // [U_r, out]
  const comm::GatherGrad grad = options_.output_grad == UlyssesOutputGrad::kPartialSum
                                    ? comm::GatherGrad::kReduceScatter
                                    : comm::GatherGrad::kSplit;
  at::Tensor merged =
      comm::AllGatherAlongDim(local, comm_, 0, split.units_per_rank, grad);  // [U, out]
  return model_->FromWindowOrder(merged, plan);                              // input order
}

absl::Status UlyssesVisionTransformer::AllReduceGradients() {
  try {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> params = model_->parameters();
    std::vector<at::Tensor> flat;
    for (at::Tensor& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      flat.push_back(p.grad().reshape({-1}));
    }
    if (comm_.size() == 1 || flat.empty()) return absl::OkStatus();
    at::Tensor bucket = at::cat(flat);
    if (absl::Status s = comm_.AllReduce(bucket, comm::ReduceOp::kSum); !s.ok()) return s;
    int64_t off = 0;
    for (at::Tensor& p : params) {
      const int64_t n = p.numel();
      p.mutable_grad().copy_(bucket.narrow(0, off, n).view_as(p));
      off += n;
    }
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return TorchErrorToStatus(
        e, absl::StrCat("Ulysses vision: summing gradients over group ", comm_.name()));
  }
}

}  // namespace dhp
