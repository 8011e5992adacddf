#include "worker/rank/retry_unavailable.h"

#include <algorithm>
#include <thread>

namespace dhp {

absl::Status RetryWhileUnavailable(const std::function<absl::Status()>& call,
                                   std::chrono::milliseconds budget,
                                   const std::function<void(std::chrono::milliseconds)>& sleep) {
  const auto t0 = std::chrono::steady_clock::now();
  std::chrono::milliseconds backoff(100), slept(0);
  for (;;) {
    absl::Status s = call();
    if (!absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s)) return s;
    const auto elapsed =
        std::max(slept, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0));
    if (elapsed + backoff > budget) return s;
    if (sleep) {
      sleep(backoff);
    } else {
      std::this_thread::sleep_for(backoff);
    }
    slept += backoff;
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(2));
  }
}

}  // namespace dhp
