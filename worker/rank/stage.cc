#include "worker/rank/stage.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp {
namespace {

std::string ShapeText(at::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

// "3 missing (a, b, c)" with at most 5 names.
std::string NameList(const std::vector<std::string>& names, const char* what) {
  std::vector<std::string> shown(names.begin(), names.begin() + std::min<size_t>(names.size(), 5));
  return absl::StrCat(names.size(), " ", what, " (", absl::StrJoin(shown, "; "),
                      names.size() > shown.size() ? "; ..." : "", ")");
}

}  // namespace

bool AccumulatesGradientsInFp32(const StageOptions& options, int64_t micro_batches) {
  return options.fp32_grad_accumulation && micro_batches > 1 && options.dtype != at::kFloat;
}

void BeginGradAccumulation(const StageOptions& options, int64_t micro_batches,
                           const std::vector<std::pair<std::string, at::Tensor>>& params) {
  if (!AccumulatesGradientsInFp32(options, micro_batches)) return;
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    if (!p.requires_grad() || p.scalar_type() == at::kFloat) continue;
    at::Tensor& grad = p.mutable_grad();
    grad = grad.defined() ? grad.to(at::kFloat)
                          : at::zeros(p.sizes(), p.options().dtype(at::kFloat));
  }
}

StateReader::StateReader(const NamedTensors& state) {
  for (const auto& [name, t] : state) {
    if (!rest_.emplace(name, t).second) unexpected_.push_back(name + " (twice)");
  }
}

at::Tensor StateReader::Take(const std::string& name, at::IntArrayRef sizes) {
  auto it = rest_.find(name);
  if (it == rest_.end()) {
    missing_.push_back(name);
    return at::Tensor();
  }
  at::Tensor t = it->second;
  rest_.erase(it);
  if (t.sizes() != sizes) {
    wrong_.push_back(absl::StrCat(name, ": checkpoint ", ShapeText(t.sizes()), ", this rank ",
                                  ShapeText(sizes)));
    return at::Tensor();
  }
  return t;
}

absl::Status StateReader::Finish(const std::string& who) {
  std::vector<std::string> unexpected = unexpected_;
  for (const auto& [name, t] : rest_) unexpected.push_back(name);
  if (missing_.empty() && unexpected.empty() && wrong_.empty() && problems_.empty()) {
    return absl::OkStatus();
  }
  std::vector<std::string> parts;
  if (!missing_.empty()) parts.push_back(NameList(missing_, "missing"));
  if (!unexpected.empty()) parts.push_back(NameList(unexpected, "unexpected"));
  if (!wrong_.empty()) parts.push_back(NameList(wrong_, "of another shape"));
  for (const std::string& p : problems_) parts.push_back(p);
  return absl::InvalidArgumentError(
      absl::StrCat("the checkpoint state does not fit ", who, ": ", absl::StrJoin(parts, "; "),
                   ". Was it written by another layout, rank or model?"));
}

}  // namespace dhp
