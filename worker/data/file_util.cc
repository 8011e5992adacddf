#include "worker/data/file_util.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace dhp {
namespace data {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return buffer.str();
}

absl::Status WriteStringToFile(absl::string_view contents, const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat(parent.string(), ": cannot create directory: ", ec.message()));
    }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open for writing: ", std::strerror(errno)));
  }
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write error"));
  return absl::OkStatus();
}

std::string JoinPath(const std::string& root, const std::string& path) {
  if (root.empty() || (!path.empty() && path[0] == '/')) return path;
  if (root.back() == '/') return root + path;
  return root + "/" + path;
}

}  // namespace data
}  // namespace dhp
