// What a rank learns of its GPU for its step metrics: the CUDA caching allocator's counters, the
// device's name, and the dense peak of known GPUs (the denominator of MFU).
//
// The CUDA queries are compiled only where LibTorch has CUDA (CMake defines DHP_WITH_CUDA when
// find_package(Torch) brings torch_cuda); in a CPU-only build they report nothing. This header
// has no LibTorch.
//
// Thread-safety: thread-safe (the allocator's counters are read under its own lock).
#ifndef DHP_WORKER_RANK_DEVICE_STATS_H_
#define DHP_WORKER_RANK_DEVICE_STATS_H_

#include <optional>
#include <string>
#include <string_view>

#include "worker/rank/rank_metrics.h"

namespace dhp {

// True when this build can query CUDA devices (DHP_WITH_CUDA).
bool BuiltWithCuda();

// The caching allocator's counters for CUDA device `device_index` (as the process sees it);
// nullopt in a CPU-only build or when no GPU is visible.
std::optional<DeviceMemory> CudaAllocatorMemory(int device_index);

// "NVIDIA H100 80GB HBM3"; "" in a CPU-only build or when no GPU is visible.
std::string CudaDeviceName(int device_index);

// Dense (no sparsity) BF16 tensor-core peak FLOP/s of a GPU from its CUDA name, per NVIDIA's
// datasheets: H100 SXM / H200 / GH200 989e12, H100 NVL and H200 NVL 835e12, H100 PCIe 756e12,
// A100 312e12, L40S 362e12, B200 2250e12. 0 for a name not in the table (then MFU needs the
// agent's --peak-tflops).
double KnownGpuPeakFlops(std::string_view name);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_DEVICE_STATS_H_
