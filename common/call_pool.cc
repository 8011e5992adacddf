#include "common/call_pool.h"

#include <pthread.h>

#include <utility>

namespace dhp {

CallPool::CallPool(std::string name, int max_threads)
    : name_(std::move(name)), max_threads_(max_threads > 0 ? max_threads : 0) {}

CallPool::~CallPool() { Stop(); }

bool CallPool::TryRun(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return false;
  if (idle_ > queue_.size()) {  // a thread is waiting with nothing handed to it yet
    queue_.push_back(std::move(task));
    cv_.notify_one();
    return true;
  }
  if (max_threads_ > 0 && threads_.size() >= max_threads_) return false;
  queue_.push_back(std::move(task));
  threads_.emplace_back([this] { Run(); });
  return true;
}

size_t CallPool::Threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

void CallPool::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void CallPool::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());  // as top and perf show it
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ++idle_;
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, and every handed-over task has run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace dhp
