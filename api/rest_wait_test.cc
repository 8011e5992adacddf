#include "api/rest_wait.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace dhp::api {
namespace {

using namespace std::chrono_literals;
using Start = std::function<void(DhpService::Done, std::shared_ptr<CancelSignal>)>;

TEST(AwaitUnlessGoneTest, ACallDoneAtOnceReturnsItsStatusWithoutAskingIfTheClientIsGone) {
  int asked = 0;
  absl::Status s = AwaitUnlessGone(
      [&] { return ++asked > 0; },
      [](DhpService::Done done, std::shared_ptr<CancelSignal>) {
        done(absl::PermissionDeniedError("no"));
      });
  EXPECT_EQ(s, absl::PermissionDeniedError("no"));
  EXPECT_EQ(asked, 0);
}

TEST(AwaitUnlessGoneTest, AClientThatStaysGetsTheAnswerFromAnotherThread) {
  std::thread answer;
  std::shared_ptr<CancelSignal> seen;
  absl::Status s = AwaitUnlessGone([] { return false; },
                                   [&](DhpService::Done done, std::shared_ptr<CancelSignal> c) {
                                     seen = c;
                                     answer = std::thread([done] {
                                       std::this_thread::sleep_for(200ms);
                                       done(absl::OkStatus());
                                     });
                                   },
                                   10ms);
  answer.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(seen->cancelled());
}

// The wait registers what ends it, as Kv::WaitAsync does; the client goes on the third check:
// the wait ends then with CANCELLED, long before its own 60 s.
TEST(AwaitUnlessGoneTest, AClientThatGoesCancelsTheWaitOnce) {
  std::atomic<int> asked{0};
  std::atomic<int> handled{0};
  const auto began = std::chrono::steady_clock::now();
  absl::Status s = AwaitUnlessGone(
      [&] { return ++asked >= 3; },
      [&](DhpService::Done done, std::shared_ptr<CancelSignal> cancel) {
        cancel->OnCancel([&handled, done] {
          ++handled;
          done(absl::CancelledError("the client went away"));
        });
      },
      20ms);
  EXPECT_EQ(s, absl::CancelledError("the client went away"));
  EXPECT_EQ(handled, 1);
  EXPECT_EQ(asked, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - began, 5s);
}

}  // namespace
}  // namespace dhp::api
