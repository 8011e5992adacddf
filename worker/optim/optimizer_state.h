// TrainingOptimizer's per-parameter AdamW state (LibTorch's torch::optim::AdamW: exp_avg,
// exp_avg_sq, step) as named tensors for checkpoints, and back. For parameter P under `prefix`:
//   <prefix>P.exp_avg, <prefix>P.exp_avg_sq   shaped like P, fp32 (P's dtype)
//   <prefix>P.step                            [1] int64
// A parameter that has never been updated has no state and no entries.
//
// How LibTorch keys its optimizer state (a string of the TensorImpl address in 1.x, the address
// itself in 2.x) is TrainingOptimizer::StateOf's business (optimizer.cc).
//
// Thread-safety: not thread-safe; the optimizer's training thread.
#ifndef DHP_WORKER_OPTIM_OPTIMIZER_STATE_H_
#define DHP_WORKER_OPTIM_OPTIMIZER_STATE_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/optim/optimizer.h"

namespace dhp {

// The state of every parameter of `params` (the optimizer's own) that has one; copies, or
// with copy false the optimizer's own moments (aliases that its next step changes).
std::vector<std::pair<std::string, at::Tensor>> AdamWStateTensors(
    TrainingOptimizer& optimizer, const TrainingOptimizer::NamedParams& params,
    const std::string& prefix, bool copy = true);

struct AdamWParamTensors {
  at::Tensor exp_avg, exp_avg_sq;
  int64_t step = 0;
};

// Validates and removes from `tensors` the state entries of `params` (see the file comment): one
// per parameter, nullopt when it has none. InvalidArgument naming the tensor when an entry is
// incomplete or shaped unlike its parameter; `tensors` is unchanged then.
absl::StatusOr<std::vector<std::optional<AdamWParamTensors>>> TakeAdamWState(
    const TrainingOptimizer::NamedParams& params, const std::string& prefix,
    std::map<std::string, at::Tensor>* tensors);

// Installs the state taken by TakeAdamWState (same `params`, in order) into the optimizer:
// entries with a value replace the parameter's state, nullopt clears it.
void SetAdamWState(TrainingOptimizer& optimizer, const TrainingOptimizer::NamedParams& params,
                   const std::vector<std::optional<AdamWParamTensors>>& state);

}  // namespace dhp

#endif  // DHP_WORKER_OPTIM_OPTIMIZER_STATE_H_
