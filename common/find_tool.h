// Finding a helper executable (dhp-ckpt) that a binary runs as a child process: the path given
// by the user, else beside this binary, else on PATH. Shared by dhpctl export and the
// controller's exports.
#ifndef DHP_COMMON_FIND_TOOL_H_
#define DHP_COMMON_FIND_TOOL_H_

#include <string>

#include "absl/status/statusor.h"

namespace dhp {

// True for a regular file this process may execute.
bool IsExecutableFile(const std::string& path);

// `given` when set: NOT_FOUND "<given> is not an executable file" unless it is one. Else
// `self_dir`/`name`, else the first `name` in the directories of `path_env` (a PATH value).
// NOT_FOUND otherwise, whose message is where it looked: "<self_dir> nor on PATH" (or "PATH").
absl::StatusOr<std::string> FindTool(const std::string& name, const std::string& given,
                                     const std::string& self_dir, const std::string& path_env);

}  // namespace dhp

#endif  // DHP_COMMON_FIND_TOOL_H_
