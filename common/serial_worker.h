// SerialWorker: one owned thread that runs posted tasks in order, for work a loop must not
// wait for (the controller: writing checkpoint manifests, deleting old checkpoints).
//
//   SerialWorker files("checkpoint files");
//   files.Post([dir] { WriteManifest(dir, json); });
//   files.Stop();  // runs what is queued, then joins
//
// Unlike a detached thread per change, the number of threads is one, and nothing outlives
// Stop(). Tasks must not throw.
//
// Thread-safety: Post, Pending and Stop may be called from any thread.
#ifndef DHP_COMMON_SERIAL_WORKER_H_
#define DHP_COMMON_SERIAL_WORKER_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dhp {

class SerialWorker {
 public:
  explicit SerialWorker(std::string name);
  ~SerialWorker();  // Stops.
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues `task`. After Stop it runs at once on the caller's thread, so that no work is lost.
  void Post(std::function<void()> task);
  // Tasks queued or running.
  size_t Pending() const;
  // Runs every queued task, then joins the thread. Idempotent.
  void Stop();

 private:
  void Run();

  const std::string name_;
  mutable std::mutex mu_;  // guards queue_, running_, stopping_
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dhp

#endif  // DHP_COMMON_SERIAL_WORKER_H_
