#include "common/proc_status.h"

#include <fstream>
#include <sstream>

namespace dhp {

int64_t ProcSelfStatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = field + ":";
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream words(line.substr(key.size()));
    int64_t kb = -1;
    words >> kb;  // "  123456 kB"
    return kb < 0 ? -1 : kb * 1024;
  }
  return -1;
}

}  // namespace dhp
