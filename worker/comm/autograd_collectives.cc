#include "worker/comm/autograd_collectives.h"

#include <c10/core/WrapDimMinimal.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>
#include <utility>

#include "worker/comm/split_sizes.h"

namespace dhp::comm {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void ThrowIfError(const absl::Status& s) { TORCH_CHECK(s.ok(), s.ToString()); }

template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  ThrowIfError(v.status());
  return *std::move(v);
}

int64_t WrapDim(const at::Tensor& x, int64_t dim) { return c10::maybe_wrap_dim(dim, x.dim()); }

// The sizes list for a gather of x along dim: given, or x.size(dim) for every rank.
std::vector<int64_t> GatherSizes(const at::Tensor& x, const Communicator& comm, int64_t dim,
                                 const std::vector<int64_t>& sizes) {
  if (!sizes.empty()) return sizes;
  return std::vector<int64_t>(comm.size(), x.size(dim));
}

// The sizes list for a scatter of x along dim: given, or an even split.
std::vector<int64_t> ScatterSizes(const at::Tensor& x, const Communicator& comm, int64_t dim,
                                  const std::vector<int64_t>& sizes, const char* what) {
  return ValueOrThrow(ResolveScatterRows(sizes, comm.size(), x.size(dim), what));
}

// The communicator travels through the autograd context as an integer (it is borrowed).
int64_t Pack(Communicator* comm) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(comm)); }
Communicator& Unpack(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(static_cast<intptr_t>(ctx->saved_data["comm"].toInt()));
}

struct AllGatherFn : public torch::autograd::Function<AllGatherFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm,
                            int64_t dim, std::vector<int64_t> sizes, bool split_grad) {
    sizes = GatherSizes(x, *comm, dim, sizes);
    ctx->saved_data["comm"] = Pack(comm);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["sizes"] = sizes;
    ctx->saved_data["split"] = split_grad;
    return GatherAlongDimNoGrad(x, *comm, dim, sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& comm = Unpack(ctx);
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    at::Tensor dx;
    if (grads[0].defined()) {
      if (ctx->saved_data["split"].toBool()) {
        const std::vector<int64_t> off = RowOffsets(sizes);
        dx = grads[0].narrow(dim, off[comm.rank()], sizes[comm.rank()]).contiguous();
      } else {
        dx = ReduceScatterAlongDimNoGrad(grads[0], comm, dim, sizes);
      }
    }
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct ReduceScatterFn : public torch::autograd::Function<ReduceScatterFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm,
                            int64_t dim, std::vector<int64_t> sizes) {
    sizes = ScatterSizes(x, *comm, dim, sizes, "ReduceScatterAlongDim");
    ctx->saved_data["comm"] = Pack(comm);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["sizes"] = sizes;
    return ReduceScatterAlongDimNoGrad(x, *comm, dim, sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor dx;
    if (grads[0].defined()) {
      dx = GatherAlongDimNoGrad(grads[0], Unpack(ctx), ctx->saved_data["dim"].toInt(),
                                ctx->saved_data["sizes"].toIntVector());
    }
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct AllToAllFn : public torch::autograd::Function<AllToAllFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm,
                            int64_t scatter_dim, int64_t gather_dim,
                            std::vector<int64_t> scatter_sizes, std::vector<int64_t> gather_sizes) {
    scatter_sizes = ScatterSizes(x, *comm, scatter_dim, scatter_sizes, "AllToAllAlongDims");
    gather_sizes = GatherSizes(x, *comm, gather_dim, gather_sizes);
    ctx->saved_data["comm"] = Pack(comm);
    ctx->saved_data["scatter_dim"] = scatter_dim;
    ctx->saved_data["gather_dim"] = gather_dim;
    ctx->saved_data["scatter_sizes"] = scatter_sizes;
    ctx->saved_data["gather_sizes"] = gather_sizes;
    return AllToAllAlongDimsNoGrad(x, *comm, scatter_dim, gather_dim, scatter_sizes, gather_sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor dx;
    if (grads[0].defined()) {
      // The inverse exchange: what was gathered is scattered back, and vice versa.
      dx = AllToAllAlongDimsNoGrad(grads[0], Unpack(ctx), ctx->saved_data["gather_dim"].toInt(),
                                   ctx->saved_data["scatter_dim"].toInt(),
                                   ctx->saved_data["gather_sizes"].toIntVector(),
                                   ctx->saved_data["scatter_sizes"].toIntVector());
    }
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct CopyToParallelFn : public torch::autograd::Function<CopyToParallelFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm) {
    ctx->saved_data["comm"] = Pack(comm);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor dx;
    if (grads[0].defined()) {
      dx = grads[0].clone(at::MemoryFormat::Contiguous);
      ThrowIfError(Unpack(ctx).AllReduce(dx, ReduceOp::kSum));
    }
    return {dx, at::Tensor()};
  }
};

struct ReduceFromParallelFn : public torch::autograd::Function<ReduceFromParallelFn> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, Communicator* comm) {
    at::Tensor y = x.clone(at::MemoryFormat::Contiguous);
    ThrowIfError(comm->AllReduce(y, ReduceOp::kSum));
    return y;
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct ScatterToParallelFn : public torch::autograd::Function<ScatterToParallelFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm,
                            int64_t dim, std::vector<int64_t> sizes) {
    sizes = ScatterSizes(x, *comm, dim, sizes, "ScatterToParallelRegion");
    ctx->saved_data["comm"] = Pack(comm);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["sizes"] = sizes;
    const std::vector<int64_t> off = RowOffsets(sizes);
    return x.narrow(dim, off[comm->rank()], sizes[comm->rank()])
        .clone(at::MemoryFormat::Contiguous);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor dx;
    if (grads[0].defined()) {
      dx = GatherAlongDimNoGrad(grads[0], Unpack(ctx), ctx->saved_data["dim"].toInt(),
                                ctx->saved_data["sizes"].toIntVector());
    }
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor GatherAlongDimNoGrad(const at::Tensor& x, Communicator& comm, int64_t dim,
                                const std::vector<int64_t>& sizes) {
  const int64_t d = WrapDim(x, dim);
  at::Tensor moved = x.movedim(d, 0).contiguous();
  at::Tensor y = ValueOrThrow(comm.AllGatherV(moved, sizes));
  return y.movedim(0, d).contiguous();
}

at::Tensor ReduceScatterAlongDimNoGrad(const at::Tensor& x, Communicator& comm, int64_t dim,
                                       const std::vector<int64_t>& sizes) {
  const int64_t d = WrapDim(x, dim);
  at::Tensor moved = x.movedim(d, 0).contiguous();
  at::Tensor y = ValueOrThrow(comm.ReduceScatterV(moved, sizes));
  return y.movedim(0, d).contiguous();
}

at::Tensor AllToAllAlongDimsNoGrad(const at::Tensor& x, Communicator& comm, int64_t scatter_dim,
                                   int64_t gather_dim, const std::vector<int64_t>& scatter_sizes,
                                   const std::vector<int64_t>& gather_sizes) {
  const int64_t sd = WrapDim(x, scatter_dim);
  const int64_t gd = WrapDim(x, gather_dim);
  TORCH_CHECK(sd != gd, "AllToAllAlongDims on group ", comm.name(),
              ": scatter_dim and gather_dim are both ", sd);
  const int p = comm.size();
  const int me = comm.rank();
  const std::vector<int64_t> ss = ScatterSizes(x, comm, sd, scatter_sizes, "AllToAllAlongDims");
  const std::vector<int64_t> gs = GatherSizes(x, comm, gd, gather_sizes);
  ThrowIfError(CheckRows(gs, p, -1, "AllToAllAlongDims gather_sizes"));
  TORCH_CHECK(gs[me] == x.size(gd), "AllToAllAlongDims on group ", comm.name(), ": rank ", me,
              " has ", x.size(gd), " along gather_dim ", gd, " but gather_sizes says ", gs[me]);
  // Flatten each outgoing chunk; rows of the exchange are elements.
  std::vector<at::Tensor> chunks = x.split_with_sizes(ss, sd);
  std::vector<at::Tensor> flat;
  std::vector<int64_t> send_rows, recv_rows;
  std::vector<std::vector<int64_t>> recv_shapes;
  for (int j = 0; j < p; ++j) {
    flat.push_back(chunks[j].contiguous().view(-1));
    send_rows.push_back(chunks[j].numel());
    std::vector<int64_t> shape = x.sizes().vec();
    shape[sd] = ss[me];
    shape[gd] = gs[j];
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    recv_rows.push_back(n);
    recv_shapes.push_back(std::move(shape));
  }
  at::Tensor recv = ValueOrThrow(comm.AllToAllV(at::cat(flat), send_rows, recv_rows));
  const std::vector<int64_t> off = RowOffsets(recv_rows);
  std::vector<at::Tensor> parts;
  for (int j = 0; j < p; ++j)
    parts.push_back(recv.narrow(0, off[j], recv_rows[j]).view(recv_shapes[j]));
  return at::cat(parts, gd);
}

at::Tensor AllGatherAlongDim(const at::Tensor& x, Communicator& comm, int64_t dim,
                             std::vector<int64_t> sizes, GatherGrad grad) {
  if (comm.size() == 1) return x;
  return AllGatherFn::apply(x, &comm, WrapDim(x, dim), std::move(sizes),
                            grad == GatherGrad::kSplit);
}

at::Tensor ReduceScatterAlongDim(const at::Tensor& x, Communicator& comm, int64_t dim,
                                 std::vector<int64_t> sizes) {
  if (comm.size() == 1) return x;
  return ReduceScatterFn::apply(x, &comm, WrapDim(x, dim), std::move(sizes));
}

at::Tensor AllToAllAlongDims(const at::Tensor& x, Communicator& comm, int64_t scatter_dim,
                             int64_t gather_dim, std::vector<int64_t> scatter_sizes,
                             std::vector<int64_t> gather_sizes) {
  if (comm.size() == 1) return x;
  return AllToAllFn::apply(x, &comm, WrapDim(x, scatter_dim), WrapDim(x, gather_dim),
                           std::move(scatter_sizes), std::move(gather_sizes));
}

at::Tensor CopyToParallelRegion(const at::Tensor& x, Communicator& comm) {
  if (comm.size() == 1) return x;
  return CopyToParallelFn::apply(x, &comm);
}

at::Tensor ReduceFromParallelRegion(const at::Tensor& x, Communicator& comm) {
  if (comm.size() == 1) return x;
  return ReduceFromParallelFn::apply(x, &comm);
}

at::Tensor ScatterToParallelRegion(const at::Tensor& x, Communicator& comm, int64_t dim,
                                   std::vector<int64_t> sizes) {
  if (comm.size() == 1) return x;
  return ScatterToParallelFn::apply(x, &comm, WrapDim(x, dim), std::move(sizes));
}

}  // namespace dhp::comm
