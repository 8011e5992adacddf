#include "worker/optim/optimizer_state.h"

#include <torch/optim/adamw.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp {
namespace {

std::string ShapeText(at::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

// The master entry of parameter `p` (`key`), if any: undefined when absent; an error when it
// is not an fp32 tensor of p's shape, or absent although p is in a reduced precision and has
// moments (`has_moments`).
absl::StatusOr<at::Tensor> TakeMaster(const std::string& key, const at::Tensor& p,
                                      bool has_moments,
                                      const std::map<std::string, at::Tensor>& tensors) {
  auto it = tensors.find(key);
  if (it == tensors.end()) {
    const bool reduced = p.scalar_type() == at::kBFloat16 || p.scalar_type() == at::kHalf;
    if (reduced && has_moments) {
      return absl::InvalidArgumentError(absl::StrCat(
          key, " is missing: the parameter is ", c10::toString(p.scalar_type()),
          " and has optimizer moments, so its fp32 master weights must be in the checkpoint"));
    }
    return at::Tensor();
  }
  const at::Tensor& m = it->second;
  if (m.sizes() != p.sizes() || m.scalar_type() != at::kFloat) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": checkpoint ", c10::toString(m.scalar_type()), " ",
                     ShapeText(m.sizes()), ", this rank's master is Float ", ShapeText(p.sizes())));
  }
  return m;
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> AdamWStateTensors(
    TrainingOptimizer& optimizer, const TrainingOptimizer::NamedParams& params,
    const std::string& prefix, bool copy) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, p] : params) {
    const at::Tensor master = optimizer.MasterOf(p);
    if (master.defined()) {
      out.emplace_back(prefix + name + ".master", copy ? master.clone() : master);
    }
    const torch::optim::AdamWParamState* found = optimizer.StateOf(p, /*create=*/false);
    if (found == nullptr) continue;
    const torch::optim::AdamWParamState& s = *found;
    const at::Tensor m = s.exp_avg().detach(), v = s.exp_avg_sq().detach();
    out.emplace_back(prefix + name + ".exp_avg", copy ? m.clone() : m);
    out.emplace_back(prefix + name + ".exp_avg_sq", copy ? v.clone() : v);
    out.emplace_back(prefix + name + ".step", at::tensor({s.step()}, at::kLong));
  }
  return out;
}

absl::StatusOr<AdamWTakenState> TakeAdamWState(const TrainingOptimizer::NamedParams& params,
                                               const std::string& prefix,
                                               std::map<std::string, at::Tensor>* tensors) {
  AdamWTakenState out;
  std::vector<std::optional<AdamWParamTensors>>& moments = out.moments;
  std::vector<std::string> taken;
  for (const auto& [name, p] : params) {
    const std::string base = prefix + name;
    const std::string keys[3] = {base + ".exp_avg", base + ".exp_avg_sq", base + ".step"};
    int present = 0;
    for (const std::string& k : keys) present += tensors->count(k);
    absl::StatusOr<at::Tensor> master = TakeMaster(base + ".master", p, present > 0, *tensors);
    if (!master.ok()) return master.status();
    out.masters.push_back(*master);
    if (master->defined()) taken.push_back(base + ".master");
    if (present == 0) {
      moments.emplace_back(std::nullopt);
      continue;
    }
    if (present != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          base, ": the optimizer state is incomplete (needs .exp_avg, .exp_avg_sq and .step)"));
    }
    AdamWParamTensors st;
    st.exp_avg = tensors->at(keys[0]);
    st.exp_avg_sq = tensors->at(keys[1]);
    const at::Tensor& step = tensors->at(keys[2]);
    for (int i = 0; i < 2; ++i) {
      const at::Tensor& t = i == 0 ? st.exp_avg : st.exp_avg_sq;
      if (t.sizes() != p.sizes()) {
        return absl::InvalidArgumentError(absl::StrCat(keys[i], ": checkpoint ", ShapeText(t.sizes()),
                                                       ", this rank's parameter ",
                                                       ShapeText(p.sizes())));
      }
    }
    if (step.numel() != 1 || step.scalar_type() != at::kLong || step.item<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(keys[2], ": expected one non-negative int64 step count"));
    }
    st.step = step.item<int64_t>();
    moments.emplace_back(std::move(st));
    for (const std::string& k : keys) taken.push_back(k);
  }
  for (const std::string& k : taken) tensors->erase(k);
  return out;
}

void SetAdamWState(TrainingOptimizer& optimizer, const TrainingOptimizer::NamedParams& params,
                   const AdamWTakenState& state) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size() && i < state.moments.size(); ++i) {
    const at::Tensor& p = params[i].second;
    optimizer.SetMaster(p, i < state.masters.size() ? state.masters[i] : at::Tensor());
    const std::optional<AdamWParamTensors>& m = state.moments[i];
    if (!m.has_value()) {
      optimizer.EraseState(p);
      continue;
    }
    torch::optim::AdamWParamState* s = optimizer.StateOf(p, /*create=*/true);
    s->step(m->step);
    // Into the dtype StateOf gave the fresh moments (fp32 for a reduced-precision parameter).
    s->exp_avg(m->exp_avg.to(s->exp_avg().options()).clone());
    s->exp_avg_sq(m->exp_avg_sq.to(s->exp_avg_sq().options()).clone());
  }
}

}  // namespace dhp
