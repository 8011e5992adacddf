// Spec validation (common/spec_validate: defaults, bounds, layouts, checkpoint paths) on every
// spec the YAML reader accepts from arbitrary bytes. It may refuse anything; it may not crash,
// and a spec it accepts must validate again unchanged (normalisation is idempotent).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/spec_validate.h"
#include "google/protobuf/util/message_differencer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  dhp::SpecOptions options;
  options.checkpoint_root = "/var/lib/dhp/checkpoints";
  absl::StatusOr<dhp::v1::JobSpec> spec = dhp::ParseJobSpec(text, options);
  if (!spec.ok()) return 0;
  dhp::v1::JobSpec again = *spec;
  const absl::Status s = dhp::NormalizeAndValidateSpec(&again, options);
  if (!s.ok() || !google::protobuf::util::MessageDifferencer::Equals(again, *spec)) {
    std::fprintf(stderr, "spec_validate_fuzzer: a valid spec does not validate unchanged: %s\n",
                 std::string(s.message()).c_str());
    std::abort();
  }
  return 0;
}
