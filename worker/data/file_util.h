// Whole-file read/write helpers for the data pipeline, with errors that name the file.
//
// Thread-safety: reentrant; no shared state.
#ifndef DHP_WORKER_DATA_FILE_UTIL_H_
#define DHP_WORKER_DATA_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dhp {
namespace data {

// Reads a whole file into a string.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes a whole file, truncating it, creating missing parent directories.
absl::Status WriteStringToFile(absl::string_view contents, const std::string& path);

// Joins a root directory and a relative path; an absolute `path` or an empty `root` is returned
// unchanged.
std::string JoinPath(const std::string& root, const std::string& path);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_FILE_UTIL_H_
