#include "worker/rank/device_stats.h"

#include <cstddef>
#include <initializer_list>

#ifdef DHP_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace dhp {
namespace {

struct GpuPeak {
  std::initializer_list<std::string_view> parts;  // all must occur in the name
  double flops;
};

// First match wins: the more specific names come first ("H100 PCIe" before "H100").
const GpuPeak kGpuPeaks[] = {
    {{"GH200"}, 989e12},          {{"H200", "NVL"}, 835e12}, {{"H200"}, 989e12},
    {{"H100", "PCIe"}, 756e12},   {{"H100", "NVL"}, 835e12}, {{"H100"}, 989e12},
    {{"A100"}, 312e12},           {{"L40S"}, 362e12},        {{"B200"}, 2250e12},
};

}  // namespace

bool BuiltWithCuda() {
#ifdef DHP_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::optional<DeviceMemory> CudaAllocatorMemory(int device_index) {
#ifdef DHP_WITH_CUDA
  if (!at::cuda::is_available() || device_index < 0) return std::nullopt;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
      static_cast<c10::DeviceIndex>(device_index));
  constexpr size_t kAggregate = 0;  // StatType::AGGREGATE (all pools) in every LibTorch
  DeviceMemory m;
  m.allocated = stats.allocated_bytes[kAggregate].current;
  m.reserved = stats.reserved_bytes[kAggregate].current;
  m.peak = stats.allocated_bytes[kAggregate].peak;
  return m;
#else
  (void)device_index;
  return std::nullopt;
#endif
}

std::string CudaDeviceName(int device_index) {
#ifdef DHP_WITH_CUDA
  if (!at::cuda::is_available() || device_index < 0) return "";
  return at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device_index))->name;
#else
  (void)device_index;
  return "";
#endif
}

double KnownGpuPeakFlops(std::string_view name) {
  for (const GpuPeak& g : kGpuPeaks) {
    bool all = true;
    for (std::string_view part : g.parts) all = all && name.find(part) != std::string_view::npos;
    if (all) return g.flops;
  }
  return 0;
}

}  // namespace dhp
