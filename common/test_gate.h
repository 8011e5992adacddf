// Gate (tests only): holds the threads that call Block() until Release(), and lets the test
// wait until a given number are held, as a busy service or a slow call would hold them.
#ifndef DHP_COMMON_TEST_GATE_H_
#define DHP_COMMON_TEST_GATE_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace dhp {

class Gate {
 public:
  void Block() {
    std::unique_lock<std::mutex> lock(mu_);
    ++blocked_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  // Whether `n` callers have blocked (so far, in all) within 20 s.
  bool WaitBlocked(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return blocked_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int blocked_ = 0;
  bool open_ = false;
};

}  // namespace dhp

#endif  // DHP_COMMON_TEST_GATE_H_
