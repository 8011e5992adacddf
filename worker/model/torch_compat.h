// Every difference between the LibTorch versions dhp builds against, in one place.
//
// Debian ships LibTorch 1.13 (CPU only); the GPU machines use LibTorch 2.x with CUDA. Model code
// calls the functions below instead of the version-specific ATen entry points. Header-only and
// stateless, so thread-safe (AutocastGuard changes only the calling thread's autocast state).
#ifndef DHP_WORKER_MODEL_TORCH_COMPAT_H_
#define DHP_WORKER_MODEL_TORCH_COMPAT_H_

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
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

// Autocast (mixed precision with fp32 master weights) on one device type, CUDA or CPU: while a
// guard lives, eligible ops (matmul, linear, conv) on that device's tensors of this thread run in
// `dtype` (bf16 in dhp). 1.13 and 2.0-2.3 have one set of entry points per device (CUDA:
// set_enabled, set_autocast_gpu_dtype; CPU: set_cpu_enabled, set_autocast_cpu_dtype); 2.4 made
// them per device type and deprecated the old ones. Like Python's torch.autocast, leaving the
// outermost guard clears the cache of casted weights. Tensors of other devices are not affected.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline constexpr const char* kCudaAutocastApi = "per-device (2.4+)";
inline bool IsAutocastEnabled(at::DeviceType device) {
  return at::autocast::is_autocast_enabled(device);
}
inline at::ScalarType AutocastDtype(at::DeviceType device) {
  return at::autocast::get_autocast_dtype(device);
}
inline void SetAutocast(at::DeviceType device, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
}
#else
inline constexpr const char* kCudaAutocastApi = "cuda-only (before 2.4)";
inline bool IsAutocastEnabled(at::DeviceType device) {
  return device == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
inline at::ScalarType AutocastDtype(at::DeviceType device) {
  return device == at::kCPU ? at::autocast::get_autocast_cpu_dtype()
                            : at::autocast::get_autocast_gpu_dtype();
}
inline void SetAutocast(at::DeviceType device, bool enabled, at::ScalarType dtype) {
  if (device == at::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

// `device` is at::kCUDA or at::kCPU.
class AutocastGuard {
 public:
  AutocastGuard(at::DeviceType device, at::ScalarType dtype)
      : device_(device),
        prev_enabled_(IsAutocastEnabled(device)),
        prev_dtype_(AutocastDtype(device)) {
    SetAutocast(device_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    SetAutocast(device_, prev_enabled_, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  at::DeviceType device_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
};

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
