#include "api/dhpctl/plan.h"

#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/dhpctl/output.h"
#include "common/memory_fit.h"
#include "common/memory_plan.h"
#include "common/spec_validate.h"

namespace dhp::dhpctl {
namespace {

PlanResult Usage(const std::string& message) {
  PlanResult r;
  r.exit_code = 2;
  r.err = "dhpctl: " + message + "\n";
  return r;
}

// "0-7", "0-1,4-5" for ascending ranks.
std::string Ranges(const std::vector<int>& v) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    parts.push_back(j > i ? absl::StrCat(v[i], "-", v[j]) : absl::StrCat(v[i]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

// RenderTable without the spaces that pad an empty last cell.
std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows) {
  std::istringstream in(RenderTable(header, rows));
  std::string out;
  for (std::string line; std::getline(in, line);) {
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

std::string VisionWords(const comm::Layout& l) {
  if (l.vision_degree == 1) return "x1";
  return absl::StrCat(
      l.vision_parallelism == comm::VisionParallelism::kTensor ? "tensor" : "sequence", " x",
      l.vision_degree);
}

std::string StageWords(const char* stage, v1::DType dtype, bool checkpointing) {
  return absl::StrCat(stage, " ",
                      dtype == v1::DTYPE_FP32   ? "fp32"
                      : dtype == v1::DTYPE_FP16 ? "fp16"
                                                : "bf16",
                      checkpointing ? " with" : " without", " activation checkpointing");
}

std::string Breakdown(const MemoryPlan& plan) {
  std::ostringstream out;
  for (const RankKindMemory& k : plan.kinds) {
    const size_t n = k.world_ranks.size();
    out << "\n"
        << n << " " << k.kind << (n == 1 ? " rank" : " ranks") << " (world rank"
        << (n == 1 ? " " : "s ") << Ranges(k.world_ranks) << ")\n";
    std::vector<std::vector<std::string>> rows;
    for (const MemoryLine& l : k.lines) rows.push_back({l.item, GiBText(l.bytes), l.detail});
    rows.push_back({"total", GiBText(k.total), ""});
    out << Table({"ITEM", "GIB", "DETAIL"}, rows);
  }
  return out.str();
}

}  // namespace

PlanResult RunPlan(const PlanRequest& req) {
  const GpuModel* gpu = FindGpuModel(req.gpu);
  if (gpu == nullptr) {
    std::vector<std::string> names;
    for (const GpuModel& g : GpuModels()) names.push_back(g.name);
    return Usage(absl::StrCat("--gpu ", req.gpu, " is not a known GPU; use one of ",
                              absl::StrJoin(names, ", ")));
  }
  if (req.gpus_per_node < 1 || req.gpus_per_node > kMaxGpusPerNode) {
    return Usage(
        absl::StrCat("--gpus-per-node ", req.gpus_per_node, " must be in 1..", kMaxGpusPerNode));
  }
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(req.spec_text, SpecOptions{});
  if (!spec.ok()) return Usage(absl::StrCat(req.source, ": ", spec.status().message()));
  absl::StatusOr<ModelPreset> preset = ResolveSpecModel(*spec, SpecOptions{});
  if (!preset.ok()) {
    return Usage(absl::StrCat(req.source, ": ", preset.status().message(),
                              "; add model.preset naming its architecture to plan it"));
  }
  FitOptions options;
  options.memory_per_gpu = gpu->memory_bytes;
  options.gpus_per_node = req.gpus_per_node;
  absl::StatusOr<std::vector<LayoutFit>> fits = FitLayouts(*spec, *preset, options);
  if (!fits.ok()) return Usage(absl::StrCat(req.source, ": ", fits.status().message()));

  const LayoutFit& own = fits->front();
  const MemoryPlan& plan = own.plan;
  const int gpus = plan.layout.WorldSize();
  std::ostringstream out;
  out << spec->name() << ": " << plan.model << " on " << gpus << (gpus == 1 ? " GPU" : " GPUs")
      << " (" << PlanLayoutText(plan.layout) << ")\n"
      << "per replica and step: " << plan.shapes.text_tokens << " tokens, up to "
      << plan.shapes.image_tokens << " image tokens = " << plan.shapes.patches
      << " patches (at most " << plan.shapes.patches_per_image << " per image)\n"
      << StageWords("vision", spec->vision().dtype(), spec->vision().activation_checkpointing())
      << ", " << StageWords("text", spec->text().dtype(), spec->text().activation_checkpointing())
      << "; flash attention (no score matrices kept)\n";
  out << Breakdown(plan);

  out << "\n"
      << gpus << " x " << gpu->name << " (" << gpu->what << ", " << GiBText(gpu->memory_bytes)
      << " GiB each), " << req.gpus_per_node << " per node:\n";
  std::vector<std::vector<std::string>> rows;
  int others_fit = 0;
  std::string best;
  for (const LayoutFit& f : *fits) {
    const comm::Layout& l = f.plan.layout;
    std::string note = f.spec_layout ? "this spec" : "";
    if (!f.why_not.empty()) absl::StrAppend(&note, note.empty() ? "" : ": ", f.why_not);
    rows.push_back(
        {VisionWords(l), l.text_degree == 1 ? "x1" : absl::StrCat("tensor x", l.text_degree),
         absl::StrCat(l.dp), l.placement == comm::Placement::kCollocated ? "collocate" : "separate",
         GiBText(f.plan.PeakBytes()), f.fits ? "yes" : "no", note});
    if (!f.spec_layout && f.fits) {
      if (others_fit++ == 0) best = PlanLayoutText(l);
    }
  }
  out << Table({"VISION", "TEXT", "DP", "PLACEMENT", "PEAK GIB", "FITS", "NOTE"}, rows);

  const int64_t peak = plan.PeakBytes();
  out << "\n";
  PlanResult result;
  if (own.fits) {
    out << "fits: the spec's layout needs " << GiBText(peak) << " of the "
        << GiBText(gpu->memory_bytes) << " GiB of each " << gpu->name << " ("
        << static_cast<int>(100.0 * static_cast<double>(peak) /
                            static_cast<double>(gpu->memory_bytes))
        << "%)\n";
    result.exit_code = 0;
  } else {
    out << "does not fit: the spec's layout on " << gpu->name << ": " << own.why_not << "; ";
    if (others_fit == 0) {
      out << "no other layout of " << gpus << " GPUs fits either\n";
    } else {
      out << others_fit << " other layout" << (others_fit == 1 ? " fits" : "s fit")
          << ", the smallest: " << best << "\n";
    }
    result.exit_code = 1;
  }
  result.out = out.str();
  return result;
}

}  // namespace dhp::dhpctl
