#include "common/serial_worker.h"

#include <pthread.h>

#include <utility>

namespace dhp {

SerialWorker::SerialWorker(std::string name) : name_(std::move(name)), thread_([this] { Run(); }) {}

SerialWorker::~SerialWorker() { Stop(); }

void SerialWorker::Post(std::function<void()> task) {
  bool queued = false;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      // A worker that is running, or has tasks queued, looks at the queue again before it
      // waits: only an idle one needs waking (a futex call on the poster's thread each time).
      wake = queue_.empty() && !running_;
      queue_.push_back(std::move(task));
      queued = true;
    }
  }
  if (!queued) return task();
  if (wake) cv_.notify_one();  // outside the lock: the woken worker does not block on it
}

size_t SerialWorker::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + (running_ ? 1 : 0);
}

void SerialWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void SerialWorker::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());  // as top and perf show it
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything has run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    task();
    lock.lock();
    running_ = false;
  }
}

}  // namespace dhp
