// The Controller's way onto its loop (controller.h): calls wait in two lanes (api::Lane), users'
// ahead of the agents' and ranks', one of each in turn while both wait; OnLoop runs a closure
// there for a caller that waits for it.
#include <future>
#include <thread>

#include "boost/asio/post.hpp"
#include "controller/controller.h"

namespace dhp::controller {

void Controller::Dispatch(std::function<absl::Status()> call, Done done, api::Lane lane) {
  {
    std::lock_guard<std::mutex> lock(dispatch_mu_);
    if (!dispatch_closed_) {
      QueueCall(lane, [this, call = std::move(call), done = std::move(done)] {
        LoopLedger::Span span(ledger_, LoopLedger::kCalls);
        done(call());
      });
      return;
    }
  }
  done(absl::UnavailableError("the controller is shutting down"));
}

void Controller::QueueCall(api::Lane lane, std::function<void()> run) {
  queued_calls_[static_cast<int>(lane)].push_back(std::move(run));
  boost::asio::post(io_, [this] { RunQueuedCall(); });
}

void Controller::RunQueuedCall() {
  std::function<void()> run;
  {
    std::lock_guard<std::mutex> lock(dispatch_mu_);
    auto& user = queued_calls_[static_cast<int>(api::Lane::kUser)];
    auto& worker = queued_calls_[static_cast<int>(api::Lane::kWorker)];
    const bool user_first = !user.empty() && (worker.empty() || !user_call_ran_last_);
    std::deque<std::function<void()>>& from = user_first ? user : worker;
    if (from.empty()) return;  // cannot be: one post per call queued
    run = std::move(from.front());
    from.pop_front();
    user_call_ran_last_ = user_first;
  }
  run();
}

absl::Status Controller::OnLoop(const std::function<absl::Status()>& fn, LoopLedger::Work work) {
  if (stopped_) return absl::UnavailableError("the controller is shutting down");
  if (std::this_thread::get_id() == loop_id_) return fn();
  auto task = std::make_shared<std::packaged_task<absl::Status()>>(fn);
  std::future<absl::Status> result = task->get_future();
  auto run = [this, task, work] {
    LoopLedger::Span span(ledger_, work);
    (*task)();
  };
  if (work == LoopLedger::kCalls) {  // an API call (REST, or a synchronous gRPC method)
    std::lock_guard<std::mutex> lock(dispatch_mu_);
    QueueCall(api::Lane::kUser, std::move(run));
  } else {
    boost::asio::post(io_, std::move(run));
  }
  while (result.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) {
    if (stopped_) return absl::UnavailableError("the controller is shutting down");
  }
  return result.get();
}

}  // namespace dhp::controller
