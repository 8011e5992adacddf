#include "worker/optim/optimizer_state.h"

#include <torch/optim/adamw.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp {
namespace {

std::string ShapeText(at::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> AdamWStateTensors(
    TrainingOptimizer& optimizer, const TrainingOptimizer::NamedParams& params,
    const std::string& prefix, bool copy) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, p] : params) {
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

absl::StatusOr<std::vector<std::optional<AdamWParamTensors>>> TakeAdamWState(
    const TrainingOptimizer::NamedParams& params, const std::string& prefix,
    std::map<std::string, at::Tensor>* tensors) {
  std::vector<std::optional<AdamWParamTensors>> out;
  std::vector<std::string> taken;
  for (const auto& [name, p] : params) {
    const std::string base = prefix + name;
    const std::string keys[3] = {base + ".exp_avg", base + ".exp_avg_sq", base + ".step"};
    int present = 0;
    for (const std::string& k : keys) present += tensors->count(k);
    if (present == 0) {
      out.emplace_back(std::nullopt);
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
    out.emplace_back(std::move(st));
    for (const std::string& k : keys) taken.push_back(k);
  }
  for (const std::string& k : taken) tensors->erase(k);
  return out;
}

void SetAdamWState(TrainingOptimizer& optimizer, const TrainingOptimizer::NamedParams& params,
                   const std::vector<std::optional<AdamWParamTensors>>& state) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size() && i < state.size(); ++i) {
    const at::Tensor& p = params[i].second;
    if (!state[i].has_value()) {
      optimizer.EraseState(p);
      continue;
    }
    torch::optim::AdamWParamState* s = optimizer.StateOf(p, /*create=*/true);
    s->step(state[i]->step);
    s->exp_avg(state[i]->exp_avg.to(p.options()).clone());
    s->exp_avg_sq(state[i]->exp_avg_sq.to(p.options()).clone());
  }
}

}  // namespace dhp
