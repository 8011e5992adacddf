#include "worker/comm/process_group_communicator.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/split_sizes.h"
#include "worker/model/torch_status.h"

namespace dhp::comm {
namespace {

// Runs a backend call; LibTorch and Gloo exceptions become a Status naming the context.
// Timeouts are DEADLINE_EXCEEDED, a lost peer (Gloo I/O error) UNAVAILABLE.
template <typename F>
absl::Status Guarded(const std::string& context, F&& f) {
  try {
    std::forward<F>(f)();
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    absl::Status s = TorchErrorToStatus(e, context);
    if (absl::StrContains(e.what_without_backtrace(), "imed out")) {
      return absl::DeadlineExceededError(s.message());
    }
    return s;
  } catch (const std::exception& e) {
    std::string msg = absl::StrCat(context, ": ", e.what());
    if (absl::StrContains(e.what(), "imed out")) return absl::DeadlineExceededError(msg);
    return absl::UnavailableError(msg);
  }
}

// Elements per row (product of the sizes after dim 0) times the element size.
int64_t RowBytes(const at::Tensor& t) {
  int64_t n = t.element_size();
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

std::vector<int64_t> WithRows(const at::Tensor& t, int64_t rows) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[0] = rows;
  return sizes;
}

absl::Status NeedRows(const at::Tensor& t, const std::string& context) {
  if (!t.defined() || t.dim() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": the tensor needs at least one dimension (rows along dim 0)"));
  }
  return absl::OkStatus();
}

bool IsReducedFloat(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

}  // namespace

ProcessGroupCommunicator::ProcessGroupCommunicator(std::string name,
                                                   c10::intrusive_ptr<compat::C10dBackend> backend,
                                                   CommStats* stats,
                                                   InFlightRegistry* inflight)
    : name_(std::move(name)),
      backend_(std::move(backend)),
      stats_(stats),
      inflight_(inflight),
      rank_(backend_->getRank()),
      size_(backend_->getSize()),
      gloo_(backend_->getBackendName() == "gloo") {}

std::string ProcessGroupCommunicator::Context(const char* op) const {
  return absl::StrCat(op, " on group ", name_, " (rank ", rank_, " of ", size_, ")");
}

void ProcessGroupCommunicator::Record(const char* op, const Volume& v) {
  if (stats_ != nullptr) stats_->Record(name_, op, v);
}

InFlightScope ProcessGroupCommunicator::Track(const char* op, int peer) {
  auto it = calls_.find(op);
  if (it == calls_.end()) it = calls_.emplace(op, 0).first;
  return InFlightScope(inflight_, name_, op, ++it->second, peer);
}

at::Tensor ProcessGroupCommunicator::Wire(const at::Tensor& t) const {
  at::Tensor c = t.contiguous();
  if (gloo_ && c.scalar_type() == at::kBFloat16) return c.view(at::kHalf);
  if (gloo_ && c.scalar_type() == at::kBool) return c.view(at::kByte);
  return c;
}

absl::Status ProcessGroupCommunicator::AllReduce(at::Tensor& tensor, ReduceOp op) {
  const std::string ctx = Context(kOpAllReduce);
  if (!tensor.defined()) return absl::InvalidArgumentError(ctx + ": undefined tensor");
  at::Tensor work = tensor;
  if (gloo_ && tensor.scalar_type() == at::kBFloat16) {
    work = tensor.to(at::kFloat).contiguous();
  } else if (!gloo_ && tensor.is_cpu()) {
    // NCCL reduces device memory only: host scalars (a norm, a stop flag) go through the
    // current GPU and back.
    work = tensor.to(at::Device(at::kCUDA)).contiguous();
  } else if (!tensor.is_contiguous()) {
    work = tensor.contiguous();
  }
  InFlightScope in_flight = Track(kOpAllReduce);
  absl::Status s = Guarded(ctx, [&] {
    std::vector<at::Tensor> tensors{work};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op == ReduceOp::kSum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
    backend_->allreduce(tensors, opts)->wait();
    if (!work.is_same(tensor)) tensor.copy_(work);
  });
  if (!s.ok()) return s;
  Record(kOpAllReduce, AllReduceVolume(work.nbytes(), size_));
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> ProcessGroupCommunicator::AllGatherV(
    const at::Tensor& input, absl::Span<const int64_t> rows_per_rank) {
  const std::string ctx = Context(kOpAllGather);
  if (absl::Status s = NeedRows(input, ctx); !s.ok()) return s;
  absl::StatusOr<std::vector<int64_t>> rows =
      ResolveGatherRows(rows_per_rank, size_, rank_, input.size(0), ctx);
  if (!rows.ok()) return rows.status();
  const int64_t max_rows = *std::max_element(rows->begin(), rows->end());
  const bool even = AllEqual(*rows);
  at::Tensor padded = input;
  if (input.size(0) < max_rows) {
    padded =
        at::cat({input, at::zeros(WithRows(input, max_rows - input.size(0)), input.options())});
  }
  at::Tensor out = at::empty(WithRows(input, max_rows * size_), input.options());
  InFlightScope in_flight = Track(kOpAllGather);
  if (max_rows > 0) {
    absl::Status s = Guarded(ctx, [&] {
      at::Tensor wire_out = Wire(out);
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int r = 0; r < size_; ++r)
        outputs[0].push_back(wire_out.narrow(0, r * max_rows, max_rows));
      std::vector<at::Tensor> inputs{Wire(padded)};
      backend_->allgather(outputs, inputs)->wait();
    });
    if (!s.ok()) return s;
  }
  Record(kOpAllGather, AllGatherVolume(max_rows * RowBytes(input), size_));
  if (even) return out;
  std::vector<at::Tensor> parts;
  for (int r = 0; r < size_; ++r) parts.push_back(out.narrow(0, r * max_rows, (*rows)[r]));
  return at::cat(parts);
}

absl::StatusOr<at::Tensor> ProcessGroupCommunicator::ReduceScatterV(
    const at::Tensor& input, absl::Span<const int64_t> rows_per_rank) {
  const std::string ctx = Context(kOpReduceScatter);
  if (absl::Status s = NeedRows(input, ctx); !s.ok()) return s;
  absl::StatusOr<std::vector<int64_t>> rows =
      ResolveScatterRows(rows_per_rank, size_, input.size(0), ctx);
  if (!rows.ok()) return rows.status();
  const int64_t mine = (*rows)[rank_];
  const int64_t row_bytes = RowBytes(input);
  InFlightScope in_flight = Track(kOpReduceScatter);
  if (!gloo_ && AllEqual(*rows)) {
    // Native reduce_scatter (NCCL).
    at::Tensor out = at::empty(WithRows(input, mine), input.options());
    absl::Status s = Guarded(ctx, [&] {
      at::Tensor in = input.contiguous();
      std::vector<at::Tensor> outputs{out};
      std::vector<std::vector<at::Tensor>> inputs(1);
      for (int r = 0; r < size_; ++r) inputs[0].push_back(in.narrow(0, r * mine, mine));
      backend_->reduce_scatter(outputs, inputs)->wait();
    });
    if (!s.ok()) return s;
    Record(kOpReduceScatter, ReduceScatterVolume(input.nbytes(), size_));
    return out;
  }
  // All-to-all of the chunks, then a local sum in rank order.
  at::Tensor recv = at::empty(WithRows(input, mine * size_), input.options());
  if (input.size(0) > 0) {  // the same on every rank: the sum of all chunks
    absl::Status s = Guarded(ctx, [&] {
      std::vector<int64_t> send_counts(rows->begin(), rows->end());
      std::vector<int64_t> recv_counts(size_, mine);
      at::Tensor wire_out = Wire(recv);
      at::Tensor wire_in = Wire(input);
      backend_->alltoall_base(wire_out, wire_in, recv_counts, send_counts)->wait();
    });
    if (!s.ok()) return s;
  }
  const at::ScalarType acc_type = IsReducedFloat(input) ? at::kFloat : input.scalar_type();
  at::Tensor acc = recv.narrow(0, 0, mine).to(acc_type, /*non_blocking=*/false, /*copy=*/true);
  for (int r = 1; r < size_; ++r) acc.add_(recv.narrow(0, r * mine, mine));
  Volume v;
  v.sent = (input.size(0) - mine) * row_bytes;
  v.received = mine * (size_ - 1) * row_bytes;
  Record(kOpReduceScatter, v);
  return acc.to(input.scalar_type());
}

absl::StatusOr<at::Tensor> ProcessGroupCommunicator::AllToAllV(
    const at::Tensor& input, absl::Span<const int64_t> send_rows,
    absl::Span<const int64_t> recv_rows) {
  const std::string ctx = Context(kOpAllToAll);
  if (absl::Status s = NeedRows(input, ctx); !s.ok()) return s;
  absl::StatusOr<AllToAllRows> rows =
      ResolveAllToAllRows(send_rows, recv_rows, size_, input.size(0), ctx);
  if (!rows.ok()) return rows.status();
  int64_t recv_total = 0;
  for (int64_t r : rows->recv) recv_total += r;
  at::Tensor out = at::empty(WithRows(input, recv_total), input.options());
  {
    InFlightScope in_flight = Track(kOpAllToAll);
    absl::Status s = Guarded(ctx, [&] {
      std::vector<int64_t> send_counts, recv_counts;  // empty: even split
      if (!rows->even) {
        send_counts = rows->send;
        recv_counts = rows->recv;
      }
      at::Tensor wire_out = Wire(out);
      at::Tensor wire_in = Wire(input);
      backend_->alltoall_base(wire_out, wire_in, recv_counts, send_counts)->wait();
    });
    if (!s.ok()) return s;
  }
  const int64_t row_bytes = RowBytes(input);
  Volume v;
  v.sent = (input.size(0) - rows->send[rank_]) * row_bytes;
  v.received = (recv_total - rows->recv[rank_]) * row_bytes;
  Record(kOpAllToAll, v);
  return out;
}

absl::Status ProcessGroupCommunicator::Broadcast(at::Tensor& tensor, int root) {
  const std::string ctx = Context(kOpBroadcast);
  if (!tensor.defined()) return absl::InvalidArgumentError(ctx + ": undefined tensor");
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat(ctx, ": root ", root, " out of range"));
  }
  at::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
  InFlightScope in_flight = Track(kOpBroadcast);
  absl::Status s = Guarded(ctx, [&] {
    std::vector<at::Tensor> tensors{Wire(work)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    backend_->broadcast(tensors, opts)->wait();
    if (!work.is_same(tensor)) tensor.copy_(work);
  });
  if (!s.ok()) return s;
  Record(kOpBroadcast, BroadcastVolume(work.nbytes(), size_, rank_ == root));
  return absl::OkStatus();
}

absl::Status ProcessGroupCommunicator::Send(const at::Tensor& tensor, int dst_rank, int tag) {
  const std::string ctx = absl::StrCat(Context(kOpSend), " to rank ", dst_rank);
  if (!tensor.defined()) return absl::InvalidArgumentError(ctx + ": undefined tensor");
  if (dst_rank < 0 || dst_rank >= size_ || dst_rank == rank_) {
    return absl::InvalidArgumentError(absl::StrCat(ctx, ": not a peer rank"));
  }
  InFlightScope in_flight = Track(kOpSend, dst_rank);
  absl::Status s = Guarded(ctx, [&] {
    std::vector<at::Tensor> tensors{Wire(tensor)};
    backend_->send(tensors, dst_rank, tag)->wait();
  });
  if (!s.ok()) return s;
  Record(kOpSend, Volume{static_cast<int64_t>(tensor.nbytes()), 0});
  return absl::OkStatus();
}

absl::Status ProcessGroupCommunicator::Recv(at::Tensor& tensor, int src_rank, int tag) {
  const std::string ctx = absl::StrCat(Context(kOpRecv), " from rank ", src_rank);
  if (!tensor.defined()) return absl::InvalidArgumentError(ctx + ": undefined tensor");
  if (src_rank < 0 || src_rank >= size_ || src_rank == rank_) {
    return absl::InvalidArgumentError(absl::StrCat(ctx, ": not a peer rank"));
  }
  at::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
  InFlightScope in_flight = Track(kOpRecv, src_rank);
  absl::Status s = Guarded(ctx, [&] {
    std::vector<at::Tensor> tensors{Wire(work)};
    backend_->recv(tensors, src_rank, tag)->wait();
    if (!work.is_same(tensor)) tensor.copy_(work);
  });
  if (!s.ok()) return s;
  Record(kOpRecv, Volume{0, static_cast<int64_t>(tensor.nbytes())});
  return absl::OkStatus();
}

absl::Status ProcessGroupCommunicator::Barrier() {
  InFlightScope in_flight = Track(kOpBarrier);
  absl::Status s = Guarded(Context(kOpBarrier), [&] { backend_->barrier()->wait(); });
  if (!s.ok()) return s;
  Record(kOpBarrier, Volume{});
  return absl::OkStatus();
}

}  // namespace dhp::comm
