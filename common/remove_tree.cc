#include "common/remove_tree.h"

#include <ftw.h>

#include <cstdio>

namespace dhp {

void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

}  // namespace dhp
