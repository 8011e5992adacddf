// Test helper: one Gloo communicator per rank thread over a shared InMemoryKvClient.
#ifndef DHP_WORKER_COMM_COMM_TEST_UTIL_H_
#define DHP_WORKER_COMM_COMM_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <numeric>
#include <string>

#include "worker/comm/in_memory_kv_client.h"
#include "worker/comm/process_groups.h"

namespace dhp::comm {

// A communicator for group rank `rank` of a `size`-rank group named `name` (world ranks 0..n-1).
inline std::unique_ptr<Communicator> MakeTestComm(
    KvClient& kv, const std::string& name, int size, int rank, CommStats* stats,
    std::chrono::milliseconds collective_timeout = std::chrono::seconds(60)) {
  GroupSpec group{name, std::vector<int>(size)};
  std::iota(group.world_ranks.begin(), group.world_ranks.end(), 0);
  ProcessGroupsOptions options;
  options.arrival_timeout = std::chrono::seconds(30);
  options.store_timeout = std::chrono::seconds(30);
  options.collective_timeout = collective_timeout;
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateCommunicator(kv, group, rank, options, stats);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(*comm) : nullptr;
}

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_COMM_TEST_UTIL_H_
