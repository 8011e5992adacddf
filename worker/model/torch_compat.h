// Every difference between the LibTorch versions dhp builds against, in one place.
//
// Debian ships LibTorch 1.13 (CPU only); the GPU machines use LibTorch 2.x with CUDA. Model code
// calls the functions below instead of the version-specific ATen entry points. Header-only and
// stateless, so thread-safe.
#ifndef DHP_WORKER_MODEL_TORCH_COMPAT_H_
#define DHP_WORKER_MODEL_TORCH_COMPAT_H_

#include <ATen/ATen.h>
#include <torch/version.h>

namespace dhp {
namespace compat {

// Scaled dot-product attention with the default scale 1/sqrt(head_dim), no dropout and no mask.
// q: [B, H, Lq, D], k/v: [B, H, Lk, D] (same head count: callers repeat GQA heads) -> [B, H, Lq,
// D]. is_causal masks key j > query i (top-left aligned, Lq == Lk in dhp).
inline at::Tensor ScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, bool is_causal) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, is_causal);
#else
  // 1.13 only has the private op; it returns (output, weights).
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, /*attn_mask=*/{},
                                                       /*dropout_p=*/0.0,
                                                       /*need_attn_weights=*/false, is_causal));
#endif
}

}  // namespace compat
}  // namespace dhp

// c10d (used by worker/comm): the class whose collectives a process-group backend
// (ProcessGroupGloo, ProcessGroupNCCL) implements. On 1.13 that is c10d::ProcessGroup; on 2.x
// ProcessGroup became a dispatcher over c10d::Backend, which ProcessGroupGloo/NCCL derive from.
// Both have the same collective signatures (allreduce, allgather, alltoall_base, ...).
// Forward-declared: include the c10d header where the type is used.
namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace dhp {
namespace compat {
#if TORCH_VERSION_MAJOR >= 2
using C10dBackend = ::c10d::Backend;
#else
using C10dBackend = ::c10d::ProcessGroup;
#endif
}  // namespace compat
}  // namespace dhp

#endif  // DHP_WORKER_MODEL_TORCH_COMPAT_H_
