#include "common/ids.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>

namespace dhp {

namespace {

constexpr int64_t kEpochMillis = 1704067200000;  // 2024-01-01T00:00:00Z
constexpr int kRandomBits = 12;
constexpr uint64_t kTimeMask = (uint64_t{1} << 40) - 1;

}  // namespace

uint64_t NextIdBits(int64_t millis, uint64_t random, uint64_t* last) {
  const uint64_t time = static_cast<uint64_t>(std::max<int64_t>(0, millis - kEpochMillis));
  uint64_t bits = ((time & kTimeMask) << kRandomBits) | (random & ((1u << kRandomBits) - 1));
  if (bits <= *last && *last != UINT64_MAX) bits = *last + 1;
  *last = bits;
  return bits;
}

std::string NewId(const std::string& prefix) {
  static std::mutex mu;  // guards gen and last
  static std::mt19937_64 gen{std::random_device{}()};
  static uint64_t last = 0;
  const int64_t millis = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  uint64_t bits;
  {
    std::lock_guard<std::mutex> lock(mu);
    bits = NextIdBits(millis, gen(), &last);
  }
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%013llx", static_cast<unsigned long long>(bits));
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
