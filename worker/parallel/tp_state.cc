#include "worker/parallel/tp_state.h"

#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"
#include "worker/comm/autograd_collectives.h"
#include "worker/model/torch_status.h"

namespace dhp::tp {
namespace {

// The full shape of a parameter whose local tensor is `local` (a shard along shard.dim).
std::vector<int64_t> FullShape(const at::Tensor& local, const ParamShard& shard) {
  std::vector<int64_t> shape = local.sizes().vec();
  shape[shard.dim] = shard.full_size;
  return shape;
}

// The gradient of p, or zeros of p's shape when it has none.
at::Tensor GradOrZeros(const at::Tensor& p) {
  return p.grad().defined() ? p.grad().detach() : at::zeros_like(p);
}

void ThrowIfError(const absl::Status& s) { TORCH_CHECK(s.ok(), s.ToString()); }

// Sets p's gradient to `g` (same shape, any dtype), allocating it in p's dtype when undefined.
void SetGrad(at::Tensor& p, const at::Tensor& g) {
  if (!p.grad().defined()) {
    p.mutable_grad() = at::empty_like(p, at::MemoryFormat::Contiguous);
  }
  p.mutable_grad().copy_(g);
}

}  // namespace

absl::Status FinishTpGradients(torch::nn::Module& module, const ShardLayout& layout,
                               comm::Communicator& tp, std::optional<at::ScalarType> reduce_dtype) {
  if (tp.size() == 1) return absl::OkStatus();
  return CatchTorch(absl::StrCat("summing replicated TP gradients on group ", tp.name()), [&] {
    at::NoGradGuard no_grad;
    const int me = tp.rank();
    struct Item {
      at::Tensor param;
      const ParamShard* shard;
      std::vector<int64_t> full_shape;
    };
    std::vector<Item> items;
    std::vector<at::Tensor> padded;
    for (const auto& entry : module.named_parameters(/*recurse=*/true)) {
      auto it = layout.find(entry.key());
      if (it == layout.end() || !it->second.HasReplicas()) continue;
      const ParamShard& shard = it->second;
      const at::Tensor& p = entry.value();
      Item item{p, &shard, FullShape(p, shard)};
      const at::Tensor grad = GradOrZeros(p);  // fp32 when accumulated in fp32 (stage.h)
      at::Tensor full = at::zeros(item.full_shape, grad.options().dtype(reduce_dtype.value_or(
                                                       grad.scalar_type())));
      full.narrow(shard.dim, shard.ranges[me].start, shard.ranges[me].length).copy_(grad);
      padded.push_back(full.view(-1));
      items.push_back(std::move(item));
    }
    if (items.empty()) return;
    // Every rank lists the same parameters in the same order; each writes only its own range,
    // so the sum over all ranks is, per range, the sum over that range's holders.
    at::Tensor flat = at::cat(padded);
    ThrowIfError(tp.AllReduce(flat, comm::ReduceOp::kSum));
    int64_t offset = 0;
    for (Item& item : items) {
      int64_t n = 1;
      for (int64_t s : item.full_shape) n *= s;
      at::Tensor full = flat.narrow(0, offset, n).view(item.full_shape);
      offset += n;
      const ShardRange& mine = item.shard->ranges[me];
      SetGrad(item.param, full.narrow(item.shard->dim, mine.start, mine.length));
    }
  });
}

absl::Status AllReduceDataParallelGrads(torch::nn::Module& module, comm::Communicator& dp,
                                        DpGradReduce reduce, int64_t bucket_bytes,
                                        std::optional<at::ScalarType> reduce_dtype) {
  if (dp.size() == 1) return absl::OkStatus();
  return CatchTorch(absl::StrCat("all-reducing gradients over group ", dp.name()), [&] {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> params = module.parameters(/*recurse=*/true);
    for (at::Tensor& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    }
    size_t begin = 0;
    while (begin < params.size()) {
      // A bucket: consecutive gradients of one dtype and device (a gradient may be fp32 on a
      // bf16 parameter: rank/stage.h), up to bucket_bytes (at least one parameter).
      size_t end = begin;
      int64_t bytes = 0;
      const at::Tensor& first = params[begin].grad();
      while (end < params.size()) {
        const at::Tensor& g = params[end].grad();
        const int64_t g_bytes = g.numel() * static_cast<int64_t>(g.element_size());
        if (end > begin && (g.scalar_type() != first.scalar_type() ||
                            g.device() != first.device() || bytes + g_bytes > bucket_bytes)) {
          break;
        }
        bytes += g_bytes;
        ++end;
      }
      std::vector<at::Tensor> flat;
      for (size_t i = begin; i < end; ++i) flat.push_back(params[i].grad().reshape(-1));
      at::Tensor bucket = at::cat(flat);
      if (reduce_dtype.has_value()) bucket = bucket.to(*reduce_dtype);
      ThrowIfError(dp.AllReduce(bucket, comm::ReduceOp::kSum));
      if (reduce == DpGradReduce::kMean) bucket.div_(dp.size());
      int64_t offset = 0;
      for (size_t i = begin; i < end; ++i) {
        at::Tensor& g = params[i].mutable_grad();
        g.copy_(bucket.narrow(0, offset, g.numel()).view(g.sizes()));
        offset += g.numel();
      }
      begin = end;
    }
  });
}

absl::StatusOr<double> GradSquaredNorm(torch::nn::Module& module, const ShardLayout& layout,
                                       comm::Communicator& tp) {
  return CatchTorch(absl::StrCat("gradient norm over group ", tp.name()), [&] {
    at::NoGradGuard no_grad;
    const int me = tp.rank();
    double local = 0.0;
    for (const auto& entry : module.named_parameters(/*recurse=*/true)) {
      const at::Tensor& g = entry.value().grad();
      if (!g.defined()) continue;
      const double sq = g.to(at::kDouble).pow(2).sum().item<double>();
      auto it = layout.find(entry.key());
      local += it == layout.end() ? sq / tp.size() : sq / it->second.Holders(me);
    }
    at::Tensor total = at::full({1}, local, at::TensorOptions().dtype(at::kDouble));
    if (tp.size() > 1) ThrowIfError(tp.AllReduce(total, comm::ReduceOp::kSum));
    return total.item<double>();
  });
}

absl::StatusOr<NamedTensors> GatherFullTensors(torch::nn::Module& module, const ShardLayout& layout,
                                               comm::Communicator& tp, TensorKind kind) {
  return CatchTorch(absl::StrCat("re-assembling full tensors on group ", tp.name()), [&] {
    at::NoGradGuard no_grad;
    NamedTensors out;
    for (const auto& entry : module.named_parameters(/*recurse=*/true)) {
      const at::Tensor& p = entry.value();
      at::Tensor local = kind == TensorKind::kGradients ? GradOrZeros(p) : p.detach();
      auto it = layout.find(entry.key());
      if (it == layout.end() || tp.size() == 1) {
        out.emplace_back(entry.key(), local.clone(at::MemoryFormat::Contiguous));
        continue;
      }
      const ParamShard& shard = it->second;
      std::vector<int64_t> lengths;
      for (const ShardRange& r : shard.ranges) lengths.push_back(r.length);
      // [..., sum of lengths, ...]: every rank's shard in rank order, repeats included.
      at::Tensor gathered = comm::GatherAlongDimNoGrad(local, tp, shard.dim, lengths);
      at::Tensor full = at::empty(FullShape(local, shard), local.options());
      int64_t offset = 0, covered = 0;
      for (int r = 0; r < tp.size(); ++r) {
        const ShardRange& range = shard.ranges[r];
        if (shard.IsFirstHolder(r)) {
          full.narrow(shard.dim, range.start, range.length)
              .copy_(gathered.narrow(shard.dim, offset, range.length));
          covered += range.length;
        }
        offset += range.length;
      }
      TORCH_CHECK(covered == shard.full_size, "shards of ", entry.key(), " cover ", covered, " of ",
                  shard.full_size, " along dim ", shard.dim);
      out.emplace_back(entry.key(), full);
    }
    return out;
  });
}

}  // namespace dhp::tp
