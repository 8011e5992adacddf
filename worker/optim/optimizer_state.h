// TrainingOptimizer's per-parameter AdamW state (LibTorch's torch::optim::AdamW: exp_avg,
// exp_avg_sq, step) and master weights as named tensors for checkpoints, and back. For parameter
// P under `prefix`:
//   <prefix>P.exp_avg, <prefix>P.exp_avg_sq   shaped like P, fp32 (or P's dtype when wider)
//   <prefix>P.step                            [1] int64
//   <prefix>P.master                          shaped like P, fp32; only when P is bf16 / fp16
// A parameter that has never been updated has no moments and no step entry; its master (a
// reduced-precision P's) is always there, so that a resumed bf16 run continues bit-identically.
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

// The state of `params`, one entry per parameter in order: the moments (nullopt when it has
// none) and the master (undefined when the checkpoint has none).
struct AdamWTakenState {
  std::vector<std::optional<AdamWParamTensors>> moments;
  std::vector<at::Tensor> masters;
};

// Validates and removes from `tensors` the state entries of `params` (see the file comment).
// InvalidArgument naming the tensor when an entry is incomplete, shaped unlike its parameter,
// or a master is not fp32, or a reduced-precision parameter has moments but no master;
// `tensors` is unchanged then.
absl::StatusOr<AdamWTakenState> TakeAdamWState(const TrainingOptimizer::NamedParams& params,
                                               const std::string& prefix,
                                               std::map<std::string, at::Tensor>* tensors);

// Installs the state taken by TakeAdamWState (same `params`, in order, their values already
// loaded) into the optimizer: moments with a value replace the parameter's state, nullopt clears
// it; a master replaces the parameter's master and value (TrainingOptimizer::SetMaster), and
// without one the master is taken from the parameter's value.
void SetAdamWState(TrainingOptimizer& optimizer, const TrainingOptimizer::NamedParams& params,
                   const AdamWTakenState& state);

}  // namespace dhp

#endif  // DHP_WORKER_OPTIM_OPTIMIZER_STATE_H_
