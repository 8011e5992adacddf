// The job spec readers: YAML (common/proto_yaml, for dhpctl files and spec_text) and proto JSON
// (api/rest_body, REST bodies), on arbitrary bytes. Neither may crash; what one accepts must
// print (YAML and JSON) and read back.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/rest_body.h"
#include "common/proto_yaml.h"
#include "dhp/v1/job_spec.pb.h"
#include "dhp/v1/service.pb.h"

namespace {

void Require(bool ok, const char* what, const std::string& detail) {
  if (ok) return;
  std::fprintf(stderr, "spec_reader_fuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  dhp::v1::JobSpec spec;
  if (dhp::ParseProtoYaml(text, &spec).ok()) {
    const std::string yaml = dhp::ProtoToYaml(spec);
    dhp::ProtoToJson(spec);
    dhp::v1::JobSpec again;
    const absl::Status s = dhp::ParseProtoYaml(yaml, &again);
    Require(s.ok(), "the YAML printed for an accepted spec does not read back",
            std::string(s.message()) + "\n" + yaml);
  }
  dhp::v1::SubmitJobRequest request;
  if (dhp::api::ParseJsonBody(text, &request).ok()) {
    const std::string json = dhp::ProtoToJson(request);
    dhp::v1::SubmitJobRequest again;
    const absl::Status s = dhp::api::ParseJsonBody(json, &again);
    Require(s.ok(), "the JSON printed for an accepted body does not read back",
            std::string(s.message()) + "\n" + json);
  }
  return 0;
}
