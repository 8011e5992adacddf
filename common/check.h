// DHP_CHECK: crash loudly on a broken invariant (a programming error, never bad input: bad
// input gets a Status). Prints "file:line: check failed: <condition>: <message>" to stderr and
// aborts, in every build.
//
//   DHP_CHECK(rank < world) << "rank " << rank << " of " << world;
//   DHP_CHECK_OK(store.Migrate());
//   DHP_CHECK_ON_THREAD(loop_checker_);   // see ThreadChecker
//
// ThreadChecker: for classes that are not thread-safe and are meant to be used from one thread
// (the controller's loop): it binds to the first thread that checks it, and every later check
// from another thread is a crash naming the checker. Detach() lets the next check rebind (an
// object built on one thread and handed to another).
#ifndef DHP_COMMON_CHECK_H_
#define DHP_COMMON_CHECK_H_

#include <atomic>
#include <sstream>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace dhp {
namespace check_internal {

// Collects the message; its destructor prints and aborts.
class Failure {
 public:
  Failure(const char* file, int line, const char* condition);
  [[noreturn]] ~Failure();
  std::ostream& stream() { return message_; }

 private:
  std::string where_;  // file:line: check failed: condition
  std::ostringstream message_;
};

// Lets `cond ? (void)0 : Voidify() & Failure(...).stream() << ...` type-check.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace check_internal

class ThreadChecker {
 public:
  // True on the bound thread; binds to the calling thread when unbound.
  bool CalledOnValidThread() const;
  void Detach() { owner_.store(std::thread::id()); }

 private:
  mutable std::atomic<std::thread::id> owner_{};
};

}  // namespace dhp

#define DHP_CHECK(condition)                       \
  (condition) ? (void)0                            \
              : ::dhp::check_internal::Voidify() & \
                    ::dhp::check_internal::Failure(__FILE__, __LINE__, #condition).stream()

#define DHP_CHECK_OK(expr)                                                   \
  do {                                                                       \
    const ::absl::Status dhp_check_status_ = (expr);                         \
    DHP_CHECK(dhp_check_status_.ok()) << #expr << ": " << dhp_check_status_; \
  } while (0)

#define DHP_CHECK_ON_THREAD(checker) \
  DHP_CHECK((checker).CalledOnValidThread()) << "called off the thread " #checker " is bound to"

#endif  // DHP_COMMON_CHECK_H_
