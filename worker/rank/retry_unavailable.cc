#include "worker/rank/retry_unavailable.h"

#include <algorithm>
#include <thread>

namespace dhp {

namespace {

using std::chrono::milliseconds;

milliseconds Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0);
}

void Sleep(const std::function<void(milliseconds)>& sleep, milliseconds d) {
  if (sleep) {
    sleep(d);
  } else {
    std::this_thread::sleep_for(d);
  }
}

}  // namespace

bool ControllerDidNotAnswer(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

absl::Status RetryWhileUnavailable(const std::function<absl::Status()>& call,
                                   milliseconds budget,
                                   const std::function<void(milliseconds)>& sleep) {
  const auto t0 = std::chrono::steady_clock::now();
  milliseconds backoff(100), slept(0);
  for (;;) {
    absl::Status s = call();
    if (!ControllerDidNotAnswer(s)) return s;
    const milliseconds elapsed = std::max(slept, Since(t0));
    if (elapsed + backoff > budget) return s;
    Sleep(sleep, backoff);
    slept += backoff;
    backoff = std::min<milliseconds>(backoff * 2, std::chrono::seconds(2));
  }
}

absl::Status RetryUntilAnswered(const std::function<absl::Status()>& call,
                                const UntilAnsweredOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  milliseconds backoff(100), slept(0), next_note = options.note_every;
  for (;;) {
    absl::Status s = call();
    if (!ControllerDidNotAnswer(s)) return s;
    const milliseconds outage = std::max(slept, Since(t0));
    if (options.note && outage >= next_note) {
      options.note(outage, s);
      next_note = outage + options.note_every;
    }
    Sleep(options.sleep, backoff);
    slept += backoff;
    backoff = std::min<milliseconds>(backoff * 2, std::max(options.max_backoff, milliseconds(1)));
  }
}

}  // namespace dhp
