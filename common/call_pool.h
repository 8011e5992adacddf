// CallPool: threads for calls that may block (a rendezvous wait, a log file read), started on
// demand up to a bound and kept for the next call. A call that finds every thread busy at the
// bound is refused rather than queued, so that the caller can answer "busy" at once.
//
//   CallPool pool("dhp-grpc-call", 1024);
//   if (!pool.TryRun([call] { Serve(call); })) Refuse(call, "RESOURCE_EXHAUSTED");
//   pool.Stop();  // waits for the calls running, then joins
//
// The gRPC server runs the methods that do not wait on the controller's loop here: with gRPC's
// callback API no gRPC thread is held while they block, and this pool bounds how many do.
// Tasks must not throw.
//
// Thread-safety: TryRun, Threads and Stop may be called from any thread.
#ifndef DHP_COMMON_CALL_POOL_H_
#define DHP_COMMON_CALL_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dhp {

class CallPool {
 public:
  // `max_threads` <= 0: no bound.
  CallPool(std::string name, int max_threads);
  ~CallPool();  // Stops.
  CallPool(const CallPool&) = delete;
  CallPool& operator=(const CallPool&) = delete;

  // Runs `task` on an idle thread, or on a new one while there are fewer than the bound.
  // False (and `task` is dropped) when every thread is busy at the bound, or after Stop.
  bool TryRun(std::function<void()> task);
  // Threads started so far (they are kept until Stop).
  size_t Threads() const;
  // Refuses further tasks, lets every handed-over task finish, then joins. Idempotent.
  void Stop();

 private:
  void Run();

  const std::string name_;
  const size_t max_threads_;  // 0: no bound
  mutable std::mutex mu_;     // guards everything below
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // handed over, not yet taken; never more than idle_
  size_t idle_ = 0;                          // threads waiting for a task
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace dhp

#endif  // DHP_COMMON_CALL_POOL_H_
