// Communicator: the collectives of one process group, as the parallel code (Ulysses, tensor
// parallelism, ZeRO-1, the hand-off) sees them. Implementations: ProcessGroupCommunicator
// (c10d ProcessGroupGloo / ProcessGroupNCCL, process_group_communicator.h) and
// LocalCommunicator (a group of one rank, local_communicator.h). Tests and benchmarks can fake
// it. Autograd-aware wrappers are in autograd_collectives.h.
//
// Conventions.
//  - Every operation works along dim 0 (callers move other dims to the front) and is a
//    collective: every member calls the same operations in the same order with matching
//    shapes, or the group hangs until the backend's timeout.
//  - Uneven splits are given as row counts (sizes along dim 0), one per group rank, the same on
//    every rank. An empty list means "even": every rank has the same number of rows.
//  - Outputs are new tensors (never aliases of the input); in-place operations say so.
//  - Every successful call is recorded in the CommStats given at construction under (name(),
//    op), with the per-rank volume (bytes by tensor size, not bytes on the wire) defined in
//    comm_stats.h.
//  - Failures (a peer died, a timeout, mismatched shapes) are returned as a Status naming the
//    group, the operation and this rank; the communicator stays usable only if the backend does.
//
// Thread-safety: not thread-safe; one thread issues a group's collectives (they are ordered).
#ifndef DHP_WORKER_COMM_COMMUNICATOR_H_
#define DHP_WORKER_COMM_COMMUNICATOR_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dhp::comm {

enum class ReduceOp { kSum, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual const std::string& name() const = 0;  // e.g. "text.tp0"
  virtual int rank() const = 0;                 // rank in this group
  virtual int size() const = 0;

  // In place: every rank's `tensor` becomes the element-wise reduction over ranks.
  virtual absl::Status AllReduce(at::Tensor& tensor, ReduceOp op) = 0;

  // Concatenation along dim 0 of every rank's input, in rank order. rows_per_rank[r] is rank r's
  // input.size(0) (empty: all equal). Uneven inputs are padded to the largest on the wire.
  // Output: [sum(rows_per_rank), ...].
  virtual absl::StatusOr<at::Tensor> AllGatherV(const at::Tensor& input,
                                                absl::Span<const int64_t> rows_per_rank) = 0;

  // Sum over ranks, scattered: the input is P consecutive chunks along dim 0 (chunk r has
  // rows_per_rank[r] rows; empty: input.size(0)/P each, which must divide); rank r returns the
  // sum over ranks of chunk r. Output: [rows_per_rank[rank], ...].
  virtual absl::StatusOr<at::Tensor> ReduceScatterV(const at::Tensor& input,
                                                    absl::Span<const int64_t> rows_per_rank) = 0;

  // Personalised exchange: the input is P consecutive chunks along dim 0, chunk j (send_rows[j]
  // rows) goes to rank j; the output is P chunks, chunk j (recv_rows[j] rows) came from rank j.
  // recv_rows[j] on this rank must equal send_rows[rank] on rank j. Both empty: input.size(0)/P
  // rows each way (must divide); output has the input's shape.
  virtual absl::StatusOr<at::Tensor> AllToAllV(const at::Tensor& input,
                                               absl::Span<const int64_t> send_rows,
                                               absl::Span<const int64_t> recv_rows) = 0;

  // In place: every rank's `tensor` becomes root's.
  virtual absl::Status Broadcast(at::Tensor& tensor, int root) = 0;

  // Point-to-point within the group; `tensor` of Recv is filled in place (shape and dtype must
  // match the sender's). Matching Send/Recv pairs use the same tag.
  virtual absl::Status Send(const at::Tensor& tensor, int dst_rank, int tag) = 0;
  virtual absl::Status Recv(at::Tensor& tensor, int src_rank, int tag) = 0;

  virtual absl::Status Barrier() = 0;

  // Even-split shorthands.
  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& input) { return AllGatherV(input, {}); }
  absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& input) {
    return ReduceScatterV(input, {});
  }
  absl::StatusOr<at::Tensor> AllToAll(const at::Tensor& input) { return AllToAllV(input, {}, {}); }
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_COMMUNICATOR_H_
