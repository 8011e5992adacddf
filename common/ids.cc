#include "common/ids.h"

#include <cstdio>
#include <mutex>
#include <random>

namespace dhp {

std::string NewId(const std::string& prefix) {
  static std::mutex mu;  // guards gen
  static std::mt19937_64 gen{std::random_device{}()};
  uint64_t bits;
  {
    std::lock_guard<std::mutex> lock(mu);
    bits = gen() & 0xffffffffffffULL;
  }
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%012llx", static_cast<unsigned long long>(bits));
  return prefix + "-" + buf;
}

bool IsPathSafeId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id == "." || id.find("..") != std::string::npos) {
    return false;
  }
  for (const char c : id) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!allowed) return false;
  }
  return true;
}

}  // namespace dhp
