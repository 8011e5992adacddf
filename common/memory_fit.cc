#include "common/memory_fit.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_layout.h"

namespace dhp {
namespace {

constexpr int64_t kMiBytes = int64_t{1} << 20;

// The spec with another layout. Degree 1 stages have no parallelism.
v1::JobSpec WithLayout(const v1::JobSpec& spec, const comm::Layout& l) {
  v1::JobSpec out = spec;
  v1::VisionStageSpec& v = *out.mutable_vision();
  v.set_degree(l.vision_degree);
  v.set_parallelism(l.vision_degree == 1 ? v1::PARALLELISM_NONE
                    : l.vision_parallelism == comm::VisionParallelism::kTensor
                        ? v1::PARALLELISM_TENSOR
                        : v1::PARALLELISM_SEQUENCE);
  v1::TextStageSpec& t = *out.mutable_text();
  t.set_degree(l.text_degree);
  t.set_parallelism(l.text_degree == 1 ? v1::PARALLELISM_NONE : v1::PARALLELISM_TENSOR);
  out.set_data_parallel_size(l.dp);
  out.set_placement(l.placement == comm::Placement::kSeparate ? v1::PLACEMENT_SEPARATE
                                                              : v1::PLACEMENT_COLLOCATE);
  return out;
}

// Orders layouts for a stable listing.
auto Key(const comm::Layout& l) {
  return std::make_tuple(l.placement == comm::Placement::kSeparate, l.vision_degree,
                         l.vision_parallelism == comm::VisionParallelism::kTensor, l.text_degree,
                         l.dp);
}

bool SameLayout(const comm::Layout& a, const comm::Layout& b) {
  const bool a_tp = a.vision_degree > 1 && a.vision_parallelism == comm::VisionParallelism::kTensor;
  const bool b_tp = b.vision_degree > 1 && b.vision_parallelism == comm::VisionParallelism::kTensor;
  return a.vision_degree == b.vision_degree && a.text_degree == b.text_degree && a.dp == b.dp &&
         a.placement == b.placement && a_tp == b_tp;
}

LayoutFit Judge(MemoryPlan plan, const FitOptions& options) {
  LayoutFit fit;
  const int group = LargestSameNodeGroup(plan.layout);
  const int64_t peak = plan.PeakBytes();
  if (group > options.gpus_per_node) {
    fit.why_not = absl::StrCat("a tensor-parallel group of ", group,
                               " ranks does not fit a node of ", options.gpus_per_node, " GPUs");
  } else if (options.memory_per_gpu > 0 && peak > options.memory_per_gpu) {
    fit.why_not = absl::StrCat("needs ", GiBText(peak), " GiB per GPU, has ",
                               GiBText(options.memory_per_gpu));
  }
  fit.fits = fit.why_not.empty();
  fit.plan = std::move(plan);
  return fit;
}

}  // namespace

const std::vector<GpuModel>& GpuModels() {
  // memory.total as nvidia-smi reports it, in MiB (what dhp-worker registers for each GPU).
  static const std::vector<GpuModel>* models = new std::vector<GpuModel>{
      {"h100-80gb", 81559 * kMiBytes, "NVIDIA H100 80GB HBM3"},
      {"h200-141gb", 143771 * kMiBytes, "NVIDIA H200 141GB HBM3e"},
      {"a100-40gb", 40960 * kMiBytes, "NVIDIA A100-SXM4-40GB"},
      {"a100-80gb", 81920 * kMiBytes, "NVIDIA A100-SXM4-80GB"},
      {"l40s-48gb", 46068 * kMiBytes, "NVIDIA L40S"},
  };
  return *models;
}

const GpuModel* FindGpuModel(std::string_view name) {
  for (const GpuModel& g : GpuModels()) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

int LargestSameNodeGroup(const comm::Layout& l) {
  const int vision_tp =
      l.vision_parallelism == comm::VisionParallelism::kTensor ? l.vision_degree : 1;
  // Collocated, vision TP group d and text TP group d both start at world rank d * W: their
  // union is the larger. Separate, they are disjoint.
  return std::max(vision_tp, l.text_degree);
}

absl::StatusOr<std::vector<LayoutFit>> FitLayouts(const v1::JobSpec& spec,
                                                  const ModelPreset& preset,
                                                  const FitOptions& options) {
  absl::StatusOr<MemoryPlan> own = PlanMemory(spec, preset, PlanDevice::kGpu);
  if (!own.ok()) return own.status();
  const comm::Layout mine = own->layout;
  const int64_t ranks = mine.WorldSize();
  const int64_t batch = spec.training().batch_size();
  std::vector<LayoutFit> others;
  const int vision_heads = preset.vision.num_heads, text_heads = preset.text.num_heads;
  for (int sv = 1; sv <= vision_heads && sv <= ranks; ++sv) {
    if (vision_heads % sv != 0) continue;
    for (comm::VisionParallelism vp :
         {comm::VisionParallelism::kSequence, comm::VisionParallelism::kTensor}) {
      if (sv == 1 && vp == comm::VisionParallelism::kTensor) continue;  // the same as sequence
      for (int tt = 1; tt <= text_heads && tt <= ranks; ++tt) {
        if (text_heads % tt != 0) continue;
        for (comm::Placement pl : {comm::Placement::kCollocated, comm::Placement::kSeparate}) {
          comm::Layout l;
          l.vision_degree = sv;
          l.text_degree = tt;
          l.vision_parallelism = vp;
          l.placement = pl;
          const int64_t per_replica =
              pl == comm::Placement::kCollocated ? std::max(sv, tt) : int64_t{sv} + tt;
          if (ranks % per_replica != 0) continue;
          l.dp = static_cast<int>(ranks / per_replica);
          if (batch > 0 && batch % l.dp != 0) continue;  // training.batch_size would be invalid
          if (SameLayout(l, mine)) continue;
          absl::StatusOr<MemoryPlan> plan =
              PlanMemory(WithLayout(spec, l), preset, PlanDevice::kGpu);
          if (!plan.ok()) continue;  // degrees the architecture does not allow
          others.push_back(Judge(*std::move(plan), options));
        }
      }
    }
  }
  std::sort(others.begin(), others.end(), [](const LayoutFit& a, const LayoutFit& b) {
    const int64_t pa = a.plan.PeakBytes(), pb = b.plan.PeakBytes();
    if (pa != pb) return pa < pb;
    return Key(a.plan.layout) < Key(b.plan.layout);
  });
  std::vector<LayoutFit> out;
  out.push_back(Judge(*std::move(own), options));
  out.front().spec_layout = true;
  for (LayoutFit& f : others) out.push_back(std::move(f));
  return out;
}

}  // namespace dhp
