// LocalCommunicator: the Communicator of a group with a single rank (e.g. "vision.sp0" when the
// vision degree is 1, "text.dp0" when dp is 1). Every collective is a local copy or a no-op and
// moves 0 bytes; calls are still counted, so the step loop's counters have the same keys for
// every layout. Send/Recv have no peer and fail with FAILED_PRECONDITION.
//
// Thread-safety: not thread-safe (see communicator.h). The CommStats is borrowed (may be null).
#ifndef DHP_WORKER_COMM_LOCAL_COMMUNICATOR_H_
#define DHP_WORKER_COMM_LOCAL_COMMUNICATOR_H_

#include <string>

#include "worker/comm/comm_stats.h"
#include "worker/comm/communicator.h"

namespace dhp::comm {

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::string name, CommStats* stats);

  const std::string& name() const override { return name_; }
  int rank() const override { return 0; }
  int size() const override { return 1; }

  absl::Status AllReduce(at::Tensor& tensor, ReduceOp op) override;
  absl::StatusOr<at::Tensor> AllGatherV(const at::Tensor& input,
                                        absl::Span<const int64_t> rows_per_rank) override;
  absl::StatusOr<at::Tensor> ReduceScatterV(const at::Tensor& input,
                                            absl::Span<const int64_t> rows_per_rank) override;
  absl::StatusOr<at::Tensor> AllToAllV(const at::Tensor& input, absl::Span<const int64_t> send_rows,
                                       absl::Span<const int64_t> recv_rows) override;
  absl::Status Broadcast(at::Tensor& tensor, int root) override;
  absl::Status Send(const at::Tensor& tensor, int dst_rank, int tag) override;
  absl::Status Recv(at::Tensor& tensor, int src_rank, int tag) override;
  absl::Status Barrier() override;

 private:
  std::string Context(const char* op) const;
  void Record(const char* op);

  const std::string name_;
  CommStats* const stats_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_LOCAL_COMMUNICATOR_H_
