#include "common/path_inside.h"

#include <filesystem>
#include <system_error>

namespace dhp {

bool PathInside(const std::string& path, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return false;
  const fs::path d = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return false;
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // the empty element after a trailing '/'
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

}  // namespace dhp
