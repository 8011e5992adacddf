// Test helper: a communicator that knows its name, rank and size and fails every collective with
// INTERNAL "unexpected collective on <name>". For code that must only ask a group for its shape
// (building a tensor-parallel model) or must refuse a layout before communicating.
#ifndef DHP_WORKER_COMM_FAILING_COMMUNICATOR_H_
#define DHP_WORKER_COMM_FAILING_COMMUNICATOR_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/communicator.h"

namespace dhp::comm {

class FailingCommunicator : public Communicator {
 public:
  FailingCommunicator(std::string name, int rank, int size)
      : name_(std::move(name)), rank_(rank), size_(size) {}
  const std::string& name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduce(at::Tensor&, ReduceOp) override { return Fail(); }
  absl::StatusOr<at::Tensor> AllGatherV(const at::Tensor&, absl::Span<const int64_t>) override {
    return Fail();
  }
  absl::StatusOr<at::Tensor> ReduceScatterV(const at::Tensor&, absl::Span<const int64_t>) override {
    return Fail();
  }
  absl::StatusOr<at::Tensor> AllToAllV(const at::Tensor&, absl::Span<const int64_t>,
                                       absl::Span<const int64_t>) override {
    return Fail();
  }
  absl::Status Broadcast(at::Tensor&, int) override { return Fail(); }
  absl::Status Send(const at::Tensor&, int, int) override { return Fail(); }
  absl::Status Recv(at::Tensor&, int, int) override { return Fail(); }
  absl::Status Barrier() override { return Fail(); }

 private:
  absl::Status Fail() const {
    return absl::InternalError(absl::StrCat("unexpected collective on ", name_));
  }
  std::string name_;
  int rank_, size_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_FAILING_COMMUNICATOR_H_
