#include "api/rest_wait.h"

#include <condition_variable>
#include <mutex>
#include <utility>

namespace dhp::api {
namespace {

// Where `done` leaves the status; shared, since `done` may outlive nothing but must not
// touch a frame that returned (it cannot: AwaitUnlessGone waits for it).
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;
};

}  // namespace

absl::Status AwaitUnlessGone(
    const std::function<bool()>& gone,
    const std::function<void(DhpService::Done, std::shared_ptr<CancelSignal>)>& start,
    std::chrono::milliseconds poll) {
  auto outcome = std::make_shared<Outcome>();
  auto cancel = std::make_shared<CancelSignal>();
  start(
      [outcome](const absl::Status& s) {
        std::lock_guard<std::mutex> lock(outcome->mu);
        outcome->status = s;
        outcome->done = true;
        outcome->cv.notify_all();
      },
      cancel);
  std::unique_lock<std::mutex> lock(outcome->mu);
  while (!outcome->cv.wait_for(lock, poll, [&] { return outcome->done; })) {
    if (cancel->cancelled()) continue;
    lock.unlock();  // gone() reads the socket, and Cancel runs the wait's handler
    if (gone()) cancel->Cancel();
    lock.lock();
  }
  return outcome->status;
}

}  // namespace dhp::api
