#include "worker/comm/local_communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/comm/split_sizes.h"

namespace dhp::comm {
namespace {

absl::Status NeedRows(const at::Tensor& t, const std::string& context) {
  if (!t.defined() || t.dim() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": the tensor needs at least one dimension (rows along dim 0)"));
  }
  return absl::OkStatus();
}

}  // namespace

LocalCommunicator::LocalCommunicator(std::string name, CommStats* stats)
    : name_(std::move(name)), stats_(stats) {}

std::string LocalCommunicator::Context(const char* op) const {
  return absl::StrCat(op, " on group ", name_, " (rank 0 of 1)");
}

void LocalCommunicator::Record(const char* op) {
  if (stats_ != nullptr) stats_->Record(name_, op, Volume{});
}

absl::Status LocalCommunicator::AllReduce(at::Tensor& tensor, ReduceOp) {
  if (!tensor.defined()) return absl::InvalidArgumentError(Context(kOpAllReduce) + ": undefined");
  Record(kOpAllReduce);
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> LocalCommunicator::AllGatherV(const at::Tensor& input,
                                                         absl::Span<const int64_t> rows) {
  const std::string ctx = Context(kOpAllGather);
  if (absl::Status s = NeedRows(input, ctx); !s.ok()) return s;
  if (auto r = ResolveGatherRows(rows, 1, 0, input.size(0), ctx); !r.ok()) return r.status();
  Record(kOpAllGather);
  return input.clone();
}

absl::StatusOr<at::Tensor> LocalCommunicator::ReduceScatterV(const at::Tensor& input,
                                                             absl::Span<const int64_t> rows) {
  const std::string ctx = Context(kOpReduceScatter);
  if (absl::Status s = NeedRows(input, ctx); !s.ok()) return s;
  if (auto r = ResolveScatterRows(rows, 1, input.size(0), ctx); !r.ok()) return r.status();
  Record(kOpReduceScatter);
  return input.clone();
}

absl::StatusOr<at::Tensor> LocalCommunicator::AllToAllV(const at::Tensor& input,
                                                        absl::Span<const int64_t> send_rows,
                                                        absl::Span<const int64_t> recv_rows) {
  const std::string ctx = Context(kOpAllToAll);
  if (absl::Status s = NeedRows(input, ctx); !s.ok()) return s;
  absl::StatusOr<AllToAllRows> rows =
      ResolveAllToAllRows(send_rows, recv_rows, 1, input.size(0), ctx);
  if (!rows.ok()) return rows.status();
  if (rows->recv[0] != rows->send[0]) {
    return absl::InvalidArgumentError(absl::StrCat(ctx, ": receives ", rows->recv[0],
                                                   " rows from itself but sends ", rows->send[0]));
  }
  Record(kOpAllToAll);
  return input.clone();
}

absl::Status LocalCommunicator::Broadcast(at::Tensor& tensor, int root) {
  const std::string ctx = Context(kOpBroadcast);
  if (!tensor.defined()) return absl::InvalidArgumentError(ctx + ": undefined tensor");
  if (root != 0)
    return absl::InvalidArgumentError(absl::StrCat(ctx, ": root ", root, " out of range"));
  Record(kOpBroadcast);
  return absl::OkStatus();
}

absl::Status LocalCommunicator::Send(const at::Tensor&, int dst_rank, int) {
  return absl::FailedPreconditionError(
      absl::StrCat(Context(kOpSend), ": no rank ", dst_rank, " in a group of one"));
}

absl::Status LocalCommunicator::Recv(at::Tensor&, int src_rank, int) {
  return absl::FailedPreconditionError(
      absl::StrCat(Context(kOpRecv), ": no rank ", src_rank, " in a group of one"));
}

absl::Status LocalCommunicator::Barrier() {
  Record(kOpBarrier);
  return absl::OkStatus();
}

}  // namespace dhp::comm
