// RunId: which run of which job (a job's attempt N is its run N). The Supervisor keys its
// queue, active runs and per-node index by it; the Scheduler, which knows nothing of jobs, keys
// allocations by the string Key() and is never asked to give it back.
// Thread-safety: a value type.
#ifndef DHP_CONTROLLER_RUN_ID_H_
#define DHP_CONTROLLER_RUN_ID_H_

#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace dhp::controller {

struct RunId {
  std::string job_id;
  int attempt = 0;

  // "job#attempt": the Scheduler's allocation key, and how logs name a run. Never parsed.
  std::string Key() const { return absl::StrCat(job_id, "#", attempt); }

  friend bool operator<(const RunId& a, const RunId& b) {
    return std::tie(a.job_id, a.attempt) < std::tie(b.job_id, b.attempt);
  }
  friend bool operator==(const RunId& a, const RunId& b) {
    return a.attempt == b.attempt && a.job_id == b.job_id;
  }
  friend bool operator!=(const RunId& a, const RunId& b) { return !(a == b); }
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_RUN_ID_H_
