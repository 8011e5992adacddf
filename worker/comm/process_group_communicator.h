// ProcessGroupCommunicator: a Communicator on a c10d process-group backend (ProcessGroupGloo on
// CPU, ProcessGroupNCCL on GPU), counting every call into a CommStats.
//
// How each operation maps onto c10d (see communicator.h for the semantics, comm_stats.h for the
// byte counts):
//   all_reduce      allreduce (Gloo: bf16 is reduced in fp32, so N counts fp32 bytes; NCCL: a
//                   CPU tensor is reduced through a copy on the current GPU)
//   all_gather      allgather into views of one output buffer; uneven inputs padded to the max
//   reduce_scatter  NCCL with even chunks: reduce_scatter. Gloo (1.13 has none) and uneven
//                   chunks: alltoall_base, then a local sum in rank order (fp32 accumulation for
//                   bf16/fp16), which moves exactly the reduce-scatter volume
//   all_to_all      alltoall_base (with split sizes when uneven)
//   broadcast, send, recv, barrier: the c10d calls of the same name
// Data-movement operations on Gloo send bf16 as fp16 bits and bool as uint8 (same bytes; Gloo
// 1.13 rejects bf16 and bool), so nothing is converted.
//
// Several communicators may share one backend (groups with identical members, e.g. "world" and
// "vision" when every rank is a vision rank); each counts under its own name.
//
// Timeouts and dead peers (Gloo). Every operation, send and recv included, waits at most the
// group's collective timeout (ProcessGroupsOptions::collective_timeout, which is Gloo's context
// timeout: c10d's wait() without a timeout falls back to it, in LibTorch 1.13 and 2.x alike; a
// send waits too, as Gloo sends only into a posted recv). A silent peer (hung, stopped, host
// gone) fails it with DEADLINE_EXCEEDED after that timeout, e.g. "recv on group world (rank 0 of
// 2) from rank 1: [...] Timed out waiting 1500ms for recv operation to complete"; a peer whose
// process died fails it at once with UNAVAILABLE ("... Connection closed by peer ..."). Either
// way Gloo then closes the group's connections, so later operations fail at once (UNAVAILABLE).
// silent_peer_test and cross_process_test pin this down.
//
// Every collective is registered in an InFlightRegistry (inflight.h; the process-wide one unless
// another is given, null for none) from the moment it is issued until the backend's wait()
// returns, with its call number: the n-th call of that operation on this communicator, counting
// from 1 the calls that got past argument checks (CommStats' count + 1 while all earlier calls
// succeeded). NCCL: wait() returns once the kernel is enqueued on the GPU stream (unless
// TORCH_NCCL_BLOCKING_WAIT / NCCL_BLOCKING_WAIT is set), so a collective stalled on the GPU is
// not seen here; the next host synchronisation stalls instead.
//
// Thread-safety: not thread-safe (see communicator.h). The CommStats and the InFlightRegistry
// are borrowed (may be null) and must outlive this; the backend is shared (intrusive_ptr).
#ifndef DHP_WORKER_COMM_PROCESS_GROUP_COMMUNICATOR_H_
#define DHP_WORKER_COMM_PROCESS_GROUP_COMMUNICATOR_H_

#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <cstdint>
#include <map>
#include <string>

#include "worker/comm/comm_stats.h"
#include "worker/comm/communicator.h"
#include "worker/comm/inflight.h"
#include "worker/model/torch_compat.h"

namespace dhp::comm {

class ProcessGroupCommunicator : public Communicator {
 public:
  ProcessGroupCommunicator(std::string name, c10::intrusive_ptr<compat::C10dBackend> backend,
                           CommStats* stats,
                           InFlightRegistry* inflight = &InFlightRegistry::Global());

  const std::string& name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

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

  const c10::intrusive_ptr<compat::C10dBackend>& backend() const { return backend_; }

 private:
  // A contiguous tensor with the same bytes in a dtype the backend moves (see header comment).
  at::Tensor Wire(const at::Tensor& t) const;
  // "all_gather on group text.tp0 (rank 1 of 2)".
  std::string Context(const char* op) const;
  void Record(const char* op, const Volume& v);
  // Numbers the next call of `op` and registers it in flight until the scope ends.
  InFlightScope Track(const char* op, int peer = -1);

  const std::string name_;
  const c10::intrusive_ptr<compat::C10dBackend> backend_;
  CommStats* const stats_;
  InFlightRegistry* const inflight_;
  std::map<std::string, int64_t, std::less<>> calls_;  // per op: calls issued so far
  const int rank_;
  const int size_;
  const bool gloo_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_PROCESS_GROUP_COMMUNICATOR_H_
