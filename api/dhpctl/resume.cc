#include "api/dhpctl/resume.h"

#include "common/proto_enum.h"

namespace dhp::dhpctl {

absl::StatusOr<v1::ResumeJobRequest> ResumeRequest(const std::string& job_id,
                                                   const ResumeLayoutFlags& flags) {
  v1::ResumeJobRequest req;
  req.set_job_id(job_id);
  if (flags.vision_degree) req.set_vision_degree(*flags.vision_degree);
  if (flags.text_degree) req.set_text_degree(*flags.text_degree);
  if (flags.data_parallel_size) req.set_data_parallel_size(*flags.data_parallel_size);
  if (flags.placement.empty()) return req;
  const std::optional<int> placement = ParseEnumName(v1::Placement_descriptor(), flags.placement);
  if (!placement || *placement == v1::PLACEMENT_UNSPECIFIED) {
    return absl::InvalidArgumentError("--placement " + flags.placement + ": use one of " +
                                      EnumChoices(v1::Placement_descriptor()) +
                                      " (as a spec's placement)");
  }
  req.set_placement(static_cast<v1::Placement>(*placement));
  return req;
}

}  // namespace dhp::dhpctl
