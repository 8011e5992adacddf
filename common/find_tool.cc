#include "common/find_tool.h"

#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace dhp {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

absl::StatusOr<std::string> FindTool(const std::string& name, const std::string& given,
                                     const std::string& self_dir, const std::string& path_env) {
  if (!given.empty()) {
    if (IsExecutableFile(given)) return given;
    return absl::NotFoundError(absl::StrCat(given, " is not an executable file"));
  }
  std::vector<std::string> looked;
  if (!self_dir.empty()) {
    const std::string beside = absl::StrCat(self_dir, "/", name);
    if (IsExecutableFile(beside)) return beside;
    looked.push_back(self_dir);
  }
  for (absl::string_view dir : absl::StrSplit(path_env, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (IsExecutableFile(candidate)) return candidate;
  }
  looked.push_back("PATH");
  return absl::NotFoundError(absl::StrJoin(looked, " nor on "));
}

}  // namespace dhp
