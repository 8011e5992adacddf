#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace dhp {
namespace check_internal {

Failure::Failure(const char* file, int line, const char* condition)
    : where_(std::string(file) + ":" + std::to_string(line) + ": check failed: " + condition) {}

Failure::~Failure() {
  const std::string message = message_.str();
  const std::string text = message.empty() ? where_ : where_ + ": " + message;
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace check_internal

bool ThreadChecker::CalledOnValidThread() const {
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id expected{};
  if (owner_.compare_exchange_strong(expected, me)) return true;  // bound now
  return expected == me;
}

}  // namespace dhp
