// Test helper: a job spec file (configs/*.yaml) parsed and normalised with ParseJobSpec, the way
// the controller stores it. A file that is missing or fails validation fails the calling test
// (EXPECT) and yields an empty spec.
#ifndef DHP_COMMON_SPEC_TEST_UTIL_H_
#define DHP_COMMON_SPEC_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/spec_validate.h"

namespace dhp {

inline v1::JobSpec LoadSpecFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << ": cannot be read";
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text.str(), SpecOptions{});
  EXPECT_TRUE(spec.ok()) << path << ": " << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

}  // namespace dhp

#endif  // DHP_COMMON_SPEC_TEST_UTIL_H_
