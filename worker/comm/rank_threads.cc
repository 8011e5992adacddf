#include "worker/comm/rank_threads.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <thread>
#include <vector>

namespace dhp::comm {

namespace {

// LibTorch 2.x's c10d flight recorder (one per process) crashed inside its std::map when
// several ranks of one process enqueued Gloo work at once: core dump with
// FlightRecorder::recordWithResetEnabled under ProcessGroupGloo::enqueue, about 1 in 45
// dist_parity_test runs under load; 0 in 90 with it off. Ranks as threads exist only in tests
// (dhp-rank runs one rank per process and issues collectives from one thread), so a test that
// links this file turns the recorder off before main(), ahead of its first process group,
// unless its environment asks for it. LibTorch 1.13 has no recorder.
const bool kFlightRecorderOff = [] {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  return true;
}();

}  // namespace

void RunRanks(int n, const std::function<void(int rank)>& fn) {
  (void)kFlightRecorderOff;
  at::set_num_threads(1);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&fn, r] {
      try {
        fn(r);
      } catch (const c10::Error& e) {
        ADD_FAILURE() << "rank " << r << " threw: " << e.what_without_backtrace();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << " threw: " << e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace dhp::comm
