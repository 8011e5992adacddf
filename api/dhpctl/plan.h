// `dhpctl plan -f spec.yaml [--gpu h100-80gb] [--gpus-per-node 8]`: the memory planner
// (common/memory_plan.h) run offline, without a controller. Prints the per-rank breakdown of the
// spec's layout (GiB, 2 decimals), then the spec's layout and its alternatives on the same
// number of GPUs with whether each fits the GPU, then a verdict line.
//
// Exit codes: 0 the spec's layout fits; 1 it does not (the verdict says why and which layouts
// would); 2 bad usage: an unknown GPU (the message lists the known ones), --gpus-per-node out of
// range, a spec that fails validation (the validation error, naming the field), or a spec whose
// architecture this process cannot know (model.weights_path without model.preset).
//
// Thread-safety: stateless functions.
#ifndef DHP_API_DHPCTL_PLAN_H_
#define DHP_API_DHPCTL_PLAN_H_

#include <string>

namespace dhp::dhpctl {

inline constexpr int kMaxGpusPerNode = 256;

struct PlanRequest {
  std::string spec_text;  // YAML or JSON
  std::string source;     // the file's name, for messages
  std::string gpu = "h100-80gb";
  int gpus_per_node = 8;
};

struct PlanResult {
  int exit_code = 0;
  std::string out;  // the tables and the verdict (stdout)
  std::string err;  // "dhpctl: ..." for exit code 2 (stderr)
};

PlanResult RunPlan(const PlanRequest& request);

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_PLAN_H_
