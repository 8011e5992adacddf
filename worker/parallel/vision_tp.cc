#include "worker/parallel/vision_tp.h"

#include <torch/nn/modules/activation.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/comm/autograd_collectives.h"
#include "worker/model/attention.h"
#include "worker/model/layers.h"
#include "worker/model/model_config.h"
#include "worker/model/param_factory.h"
#include "worker/model/torch_status.h"

namespace dhp {
namespace {

bool EndsWithAny(const std::string& name, std::initializer_list<const char*> suffixes) {
  for (const char* s : suffixes) {
    if (absl::EndsWith(name, s)) return true;
  }
  return false;
}

}  // namespace

VisionTpShardKind VisionTpShardOf(const std::string& name) {
  if (EndsWithAny(name, {"attn.qkv.weight", "attn.qkv.bias"})) return VisionTpShardKind::kQkvRows;
  if (EndsWithAny(name, {"mlp.gate_proj.weight", "mlp.gate_proj.bias", "mlp.up_proj.weight",
                         "mlp.up_proj.bias", "merger.mlp.0.weight", "merger.mlp.0.bias"})) {
    return VisionTpShardKind::kRows;
  }
  if (EndsWithAny(name, {"attn.proj.weight", "mlp.down_proj.weight", "merger.mlp.2.weight"})) {
    return VisionTpShardKind::kCols;
  }
  return VisionTpShardKind::kReplicated;
}

absl::Status ValidateVisionTp(const VisionConfig& config, int tp) {
  if (tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vision tensor-parallel degree ", tp, " must be at least 1"));
  }
  const std::pair<const char*, int64_t> dims[] = {
      {"num_heads", config.num_heads},
      {"intermediate_size", config.intermediate_size},
      {"4*hidden_size (merger width)", 4 * int64_t{config.hidden_size}}};
  for (const auto& [field, value] : dims) {
    if (value % tp != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vision tensor-parallel degree ", tp, " must divide ", field, " ", value));
    }
  }
  return absl::OkStatus();
}

at::Tensor ShardVisionTensor(const std::string& name, const at::Tensor& full, int rank, int size) {
  switch (VisionTpShardOf(name)) {
    case VisionTpShardKind::kReplicated:
      return full.clone(at::MemoryFormat::Contiguous);
    case VisionTpShardKind::kRows: {
      const int64_t n = full.size(0) / size;
      return full.narrow(0, rank * n, n).contiguous();
    }
    case VisionTpShardKind::kCols: {
      const int64_t n = full.size(1) / size;
      return full.narrow(1, rank * n, n).contiguous();
    }
    case VisionTpShardKind::kQkvRows: {
      std::vector<int64_t> shape = full.sizes().vec();  // [3*H*D, ...]
      std::vector<int64_t> split = shape;
      split[0] = shape[0] / 3;
      split.insert(split.begin(), 3);  // [3, H*D, ...]
      const int64_t n = split[1] / size;
      at::Tensor part = full.reshape(split).narrow(1, rank * n, n);  // [3, H*D/P, ...]
      shape[0] = 3 * n;
      return part.reshape(shape).contiguous();  // [q_r; k_r; v_r]
    }
  }
  return at::Tensor();
}

at::Tensor UnshardVisionTensor(const std::string& name, const std::vector<at::Tensor>& shards) {
  switch (VisionTpShardOf(name)) {
    case VisionTpShardKind::kReplicated:
      return shards.front().clone(at::MemoryFormat::Contiguous);
    case VisionTpShardKind::kRows:
      return at::cat(shards, 0);
    case VisionTpShardKind::kCols:
      return at::cat(shards, 1);
    case VisionTpShardKind::kQkvRows: {
      std::vector<at::Tensor> parts;
      for (const at::Tensor& s : shards) {
        std::vector<int64_t> split = s.sizes().vec();
        split[0] /= 3;
        split.insert(split.begin(), 3);  // [3, H*D/P, ...]
        parts.push_back(s.reshape(split));
      }
      at::Tensor full = at::cat(parts, 1);  // [3, H*D, ...]
      std::vector<int64_t> shape = full.sizes().vec();
      shape.erase(shape.begin());
      shape[0] *= 3;
      return full.reshape(shape).contiguous();
    }
  }
  return at::Tensor();
}

at::Tensor ReadVisionShard(const TensorSource& src, const std::string& prefix,
                           const std::string& name, int rank, int size) {
  const std::string full = prefix + name;
  const std::vector<int64_t> shape = src.Shape(full);
  switch (VisionTpShardOf(name)) {
    case VisionTpShardKind::kReplicated:
      return src.Whole(full);
    case VisionTpShardKind::kRows: {
      const int64_t n = shape[0] / size;
      return src.Slice(full, 0, rank * n, n);
    }
    case VisionTpShardKind::kCols: {
      TORCH_CHECK_VALUE(shape.size() >= 2, full, " must have 2 dimensions");
      const int64_t n = shape[1] / size;
      return src.Slice(full, 1, rank * n, n);
    }
    case VisionTpShardKind::kQkvRows: {
      const int64_t third = shape[0] / 3, n = third / size;  // [q_r; k_r; v_r]
      return src.Rows(full, {{rank * n, n}, {third + rank * n, n}, {2 * third + rank * n, n}});
    }
  }
  return at::Tensor();
}

absl::StatusOr<std::unique_ptr<VisionTpTransformer>> VisionTpTransformer::Create(
    const VisionConfig& config, const TensorSource& src, const std::string& prefix,
    comm::Communicator& comm) {
  if (absl::Status s = ValidateVisionTp(config, comm.size()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("group ", comm.name(), ": ", s.message()));
  }
  std::string missing;  // the first parameter `src` does not know
  const int rank = comm.rank(), size = comm.size();
  // Each parameter is this rank's shard, read from `src` as it is (dtype, device): no full-size
  // or default-initialised tensor is made.
  const ParamFactory shard = [&](const ParamRequest& request) {
    const std::string name = prefix + request.name;
    if (!src.Has(name)) missing = name;
    CheckSourceTensor(src, name, request);
    return ReadVisionShard(src, prefix, request.name, rank, size);
  };
  absl::StatusOr<VisionTransformer> model = CatchTorch(
      "vision TP: building the tower", [&] { return VisionTransformer(config, shard); });
  if (!missing.empty()) {
    return absl::NotFoundError(absl::StrCat("vision TP: no full tensor for parameter ", missing));
  }
  if (!model.ok()) return model.status();
  return std::unique_ptr<VisionTpTransformer>(new VisionTpTransformer(*std::move(model), comm));
}

absl::StatusOr<std::unique_ptr<VisionTpTransformer>> VisionTpTransformer::Create(
    const VisionTransformer& full, comm::Communicator& comm) {
  return Create(full->config(), ModuleTensorSource(*full), "", comm);
}

VisionTpTransformer::VisionTpTransformer(VisionTransformer model, comm::Communicator& comm)
    : model_(std::move(model)), comm_(comm) {}

at::Tensor VisionTpTransformer::RowParallel(const at::Tensor& x, const at::Tensor& weight,
                                            const at::Tensor& bias) {
  at::Tensor partial = at::linear(x, weight);  // [S, out], this rank's share of the sum
  return comm::ReduceFromParallelRegion(partial, comm_) + bias;
}

at::Tensor VisionTpTransformer::Forward(const at::Tensor& pixels, const VisionWindowPlan& plan) {
  const VisionConfig& c = model_->config();
  TORCH_CHECK_VALUE(pixels.dim() == 2 && pixels.size(0) == plan.num_patches, "vision TP: pixels ",
                    pixels.sizes(), " but the image grids sum to ", plan.num_patches, " patches");
  at::Tensor x = model_->patch_embed(pixels);                // [N, h], replicated
  auto [cos, sin] = model_->RotaryCosSin(plan, x.device());  // [N, D], window order
  x = model_->ToWindowOrder(x, plan);                        // [N, h], window order
  for (int i = 0; i < c.depth; ++i) {
    VisionBlock blk = model_->block(i);
    const std::vector<int64_t>& segs =
        model_->IsFullAttentionBlock(i) ? plan.cu_seqlens : plan.cu_window_seqlens;
    at::Tensor h = comm::CopyToParallelRegion(blk->norm1(x), comm_);
    auto [q, k, v] = blk->attn->QkvHeads(h, cos, sin);  // [N, H/P, D]
    at::Tensor o = VarlenAttention(q, k, v, segs, /*causal=*/false);
    o = o.reshape({o.size(0), o.size(1) * o.size(2)});  // [N, h/P]
    x = x + RowParallel(o, blk->attn->proj->weight, blk->attn->proj->bias);
    GatedMlp& mlp = blk->mlp;
    h = comm::CopyToParallelRegion(blk->norm2(x), comm_);
    at::Tensor m = at::silu(mlp->gate_proj(h)) * mlp->up_proj(h);  // [N, I/P]
    x = x + RowParallel(m, mlp->down_proj->weight, mlp->down_proj->bias);
  }
  PatchMerger& merger = model_->merger;
  const int64_t merged = int64_t{MergeUnit(c)} * c.hidden_size;
  at::Tensor u = merger->ln_q(x).reshape({x.size(0) / MergeUnit(c), merged});  // [U, 4h]
  u = comm::CopyToParallelRegion(u, comm_);
  u = merger->mlp->ptr<DenseImpl>(0)->forward(u);  // [U, 4h/P]
  u = merger->mlp->ptr<torch::nn::GELUImpl>(1)->forward(u);
  auto mlp2 = merger->mlp->ptr<DenseImpl>(2);
  at::Tensor out = RowParallel(u, mlp2->weight, mlp2->bias);  // [U, out], window order
  return model_->FromWindowOrder(out, plan);
}

absl::StatusOr<std::map<std::string, at::Tensor>> VisionTpTransformer::GatherFull(bool grads) {
  return CatchTorch(absl::StrCat("vision TP: gathering full tensors over ", comm_.name()), [&] {
    at::NoGradGuard no_grad;
    std::map<std::string, at::Tensor> out;
    for (const auto& item : model_->named_parameters(/*recurse=*/true)) {
      const at::Tensor& p = item.value();
      at::Tensor t = grads ? p.grad() : p.detach();
      if (!t.defined()) t = at::zeros_like(p);
      if (VisionTpShardOf(item.key()) == VisionTpShardKind::kReplicated || comm_.size() == 1) {
        out[item.key()] = t.clone(at::MemoryFormat::Contiguous);
        continue;
      }
      at::Tensor all = comm::GatherAlongDimNoGrad(t.reshape({1, -1}), comm_, 0, {});  // [P, n]
      std::vector<at::Tensor> shards;
      for (int r = 0; r < comm_.size(); ++r) shards.push_back(all[r].view_as(p));
      out[item.key()] = UnshardVisionTensor(item.key(), shards);
    }
    return out;
  });
}

absl::StatusOr<std::map<std::string, at::Tensor>> VisionTpTransformer::GatherFullGradients() {
  return GatherFull(/*grads=*/true);
}

absl::StatusOr<std::map<std::string, at::Tensor>> VisionTpTransformer::GatherFullParameters() {
  return GatherFull(/*grads=*/false);
}

}  // namespace dhp
