// Which layouts of a job fit a GPU: GPU models by name, and the planner (memory_plan.h) run
// over the spec's own layout and its alternatives on the same number of GPUs. Used by
// `dhpctl plan`. Plain arithmetic, no LibTorch; stateless and thread-safe.
#ifndef DHP_COMMON_MEMORY_FIT_H_
#define DHP_COMMON_MEMORY_FIT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/memory_plan.h"
#include "common/model_presets.h"
#include "dhp/v1/job_spec.pb.h"

namespace dhp {

struct GpuModel {
  std::string name;      // "h100-80gb"
  int64_t memory_bytes;  // what nvidia-smi reports as memory.total (and dhp-worker registers)
  std::string what;      // "NVIDIA H100 80GB HBM3"
};

// h100-80gb, h200-141gb, a100-40gb, a100-80gb, l40s-48gb.
const std::vector<GpuModel>& GpuModels();
// nullptr when unknown.
const GpuModel* FindGpuModel(std::string_view name);

struct FitOptions {
  int64_t memory_per_gpu = 0;  // bytes a rank may use
  int gpus_per_node = 8;       // a tensor-parallel group must sit on one node
};

struct LayoutFit {
  MemoryPlan plan;
  bool spec_layout = false;  // the spec's own layout
  bool fits = false;
  // Empty when it fits; otherwise why not, e.g. "needs 95.31 GiB per GPU, has 79.65" or
  // "a tensor-parallel group of 16 ranks does not fit a node of 8 GPUs".
  std::string why_not;
};

// The largest group of ranks that must share a node (the scheduler's same-node groups: text TP,
// and vision TP, merged where they overlap).
int LargestSameNodeGroup(const comm::Layout& layout);

// Evaluates `spec`'s layout (first) and every other layout with the same number of ranks: vision
// sequence parallelism or vision tensor parallelism of every degree dividing the vision heads,
// text tensor parallelism of every degree the text config allows, collocated or separate, with
// dp = ranks / ranks per replica (training.batch_size must divide by it). The others follow in
// increasing order of their peak per-rank bytes. `spec` must be normalised and valid for
// `preset`; InvalidArgument (PlanMemory's) otherwise.
absl::StatusOr<std::vector<LayoutFit>> FitLayouts(const v1::JobSpec& spec,
                                                  const ModelPreset& preset,
                                                  const FitOptions& options);

}  // namespace dhp

#endif  // DHP_COMMON_MEMORY_FIT_H_
