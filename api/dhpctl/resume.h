// `dhpctl resume JOB [--vision-degree N] [--text-degree N] [--dp N]
// [--placement collocate|separate]`: the ResumeJobRequest its flags make. A flag not given keeps
// the job's value; the controller validates the new layout against the job's spec and cluster.
//
// Thread-safety: stateless functions.
#ifndef DHP_API_DHPCTL_RESUME_H_
#define DHP_API_DHPCTL_RESUME_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "dhp/v1/service.pb.h"

namespace dhp::dhpctl {

struct ResumeLayoutFlags {
  std::optional<int32_t> vision_degree;       // --vision-degree
  std::optional<int32_t> text_degree;         // --text-degree
  std::optional<int32_t> data_parallel_size;  // --dp
  std::string placement;                      // --placement; "": keep the job's
};

// INVALID_ARGUMENT naming --placement when it is neither collocate nor separate (the spellings
// of a spec's placement, in any case). Degrees go to the controller as given: it says what is
// wrong with them for this job.
absl::StatusOr<v1::ResumeJobRequest> ResumeRequest(const std::string& job_id,
                                                   const ResumeLayoutFlags& flags);

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_RESUME_H_
