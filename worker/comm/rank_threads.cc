#include "worker/comm/rank_threads.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <exception>
#include <thread>
#include <vector>

namespace dhp::comm {

void RunRanks(int n, const std::function<void(int rank)>& fn) {
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
