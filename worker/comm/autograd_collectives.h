// Autograd-aware collectives: differentiable wrappers around a Communicator for the parallel
// code (Ulysses sequence parallelism, Megatron tensor parallelism). Each is a custom autograd
// Function whose backward issues the adjoint collective on the same communicator:
//
//   function                   forward                              backward
//   AllGatherAlongDim          concat of every rank's x along dim   kReduceScatter: sum over
//                                                                   ranks, own slice;
//                                                                   kSplit: own slice
//   ReduceScatterAlongDim      own slice of the sum over ranks      all-gather
//   AllToAllAlongDims          split scatter_dim over ranks,        the inverse all-to-all
//                              concat what arrives along gather_dim (scatter_dim <-> gather_dim)
//   CopyToParallelRegion       identity                             all-reduce (sum)
//   ReduceFromParallelRegion   all-reduce (sum)                     identity
//   ScatterToParallelRegion    own slice along dim                  all-gather
//
// Uneven shards: `sizes` (and the all-to-all's scatter_sizes / gather_sizes) give every rank's
// extent along the sharded dim, the same list on every rank; empty means even. Ulysses splits the
// vision sequence at window boundaries, so its shards differ: x [s_r, H, D] on rank r ->
// AllToAllAlongDims(x, comm, /*scatter_dim=*/1, /*gather_dim=*/0, {}, {s_0, ..., s_{P-1}}) ->
// [sum s, H/P, D]; the inverse takes scatter_sizes = {s_0, ...} and gather_sizes = {}.
//
// Which AllGather backward? kReduceScatter when each rank's use of the gathered tensor differs
// (rank-local loss terms, TP layers after the gather): the gradient of the gathered tensor is
// then a partial sum per rank. kSplit when every rank computes the same thing from it (the
// gradient is already complete on every rank).
//
// Size-1 groups: every function is the identity (x returned as is; nothing is recorded).
// Failures throw c10::Error carrying the communicator's Status message (autograd cannot return a
// Status): call these inside the rank's CatchTorch boundary. The communicator must stay alive
// until backward has run. Thread-safety: as the communicator (one thread per group).
#ifndef DHP_WORKER_COMM_AUTOGRAD_COLLECTIVES_H_
#define DHP_WORKER_COMM_AUTOGRAD_COLLECTIVES_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "worker/comm/communicator.h"

namespace dhp::comm {

enum class GatherGrad { kReduceScatter, kSplit };

at::Tensor AllGatherAlongDim(const at::Tensor& x, Communicator& comm, int64_t dim,
                             std::vector<int64_t> sizes = {},
                             GatherGrad grad = GatherGrad::kReduceScatter);

at::Tensor ReduceScatterAlongDim(const at::Tensor& x, Communicator& comm, int64_t dim,
                                 std::vector<int64_t> sizes = {});

// scatter_sizes[j]: extent of scatter_dim sent to rank j (sums to x.size(scatter_dim); empty:
// even). gather_sizes[j]: rank j's extent of gather_dim (entry `rank` = x.size(gather_dim);
// empty: all equal). Output: scatter_dim = scatter_sizes[rank], gather_dim = sum(gather_sizes).
at::Tensor AllToAllAlongDims(const at::Tensor& x, Communicator& comm, int64_t scatter_dim,
                             int64_t gather_dim, std::vector<int64_t> scatter_sizes = {},
                             std::vector<int64_t> gather_sizes = {});

at::Tensor CopyToParallelRegion(const at::Tensor& x, Communicator& comm);
at::Tensor ReduceFromParallelRegion(const at::Tensor& x, Communicator& comm);
at::Tensor ScatterToParallelRegion(const at::Tensor& x, Communicator& comm, int64_t dim,
                                   std::vector<int64_t> sizes = {});

// Non-differentiable building blocks (also used by the backward passes); same semantics.
at::Tensor GatherAlongDimNoGrad(const at::Tensor& x, Communicator& comm, int64_t dim,
                                const std::vector<int64_t>& sizes);
at::Tensor ReduceScatterAlongDimNoGrad(const at::Tensor& x, Communicator& comm, int64_t dim,
                                       const std::vector<int64_t>& sizes);
at::Tensor AllToAllAlongDimsNoGrad(const at::Tensor& x, Communicator& comm, int64_t scatter_dim,
                                   int64_t gather_dim, const std::vector<int64_t>& scatter_sizes,
                                   const std::vector<int64_t>& gather_sizes);

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_AUTOGRAD_COLLECTIVES_H_
