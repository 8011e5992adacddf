// ProcessGroupCommunicator registers its collectives in the process-wide InFlightRegistry while
// they run (real Gloo, ranks as threads): a rank stuck because its peer never joins is visible
// there, with the group, the operation and the call number, until the backend gives up.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "worker/comm/comm_test_util.h"
#include "worker/comm/inflight.h"
#include "worker/comm/rank_threads.h"

namespace dhp::comm {
namespace {

using std::chrono::milliseconds;

// Polls the global registry until an entry of `group` with `op` and `call` shows up.
std::optional<InFlightOp> WaitInFlight(const std::string& group, const std::string& op,
                                       int64_t call, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const InFlightOp& o : InFlightRegistry::Global().Snapshot()) {
      if (o.group == group && o.op == op && o.call == call) return o;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  return std::nullopt;
}

bool AnyOf(const std::string& group, const std::string& op) {
  for (const InFlightOp& o : InFlightRegistry::Global().Snapshot()) {
    if (o.group == group && o.op == op) return true;
  }
  return false;
}

TEST(InFlightCommunicatorTest, StalledAllReduceIsRegisteredUntilTheBackendGivesUp) {
  InMemoryKvClient kv;
  std::atomic<bool> seen{false};
  std::atomic<bool> done{false};
  RunRanks(2, [&](int rank) {
    CommStats stats;
    auto comm = MakeTestComm(kv, "text.tp0", 2, rank, &stats, milliseconds(2000));
    ASSERT_NE(comm, nullptr);
    for (int i = 0; i < 2; ++i) {  // calls 1 and 2 complete
      at::Tensor x = at::ones({4});
      ASSERT_TRUE(comm->AllReduce(x, ReduceOp::kSum).ok());
    }
    if (rank == 0) {
      at::Tensor x = at::ones({4});
      absl::Status s = comm->AllReduce(x, ReduceOp::kSum);  // call 3: rank 1 never joins
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
      EXPECT_TRUE(seen) << "rank 1 did not see the stalled all_reduce in the registry";
      // Unregistered once wait() has returned (with the timeout).
      EXPECT_FALSE(AnyOf("text.tp0", kOpAllReduce));
      EXPECT_EQ(stats.Get("text.tp0", kOpAllReduce).calls, 2);
      done = true;
    } else {
      std::optional<InFlightOp> op = WaitInFlight("text.tp0", kOpAllReduce, 3, milliseconds(1800));
      ASSERT_TRUE(op.has_value()) << "rank 0's third all_reduce never showed up in flight";
      seen = true;
      // While rank 0 waits, the oldest entry of the process is its all_reduce.
      std::optional<InFlightOp> oldest = InFlightRegistry::Global().Oldest();
      ASSERT_TRUE(oldest.has_value());
      EXPECT_EQ(oldest->group, "text.tp0");
      EXPECT_EQ(oldest->op, "all_reduce");
      EXPECT_EQ(oldest->call, stats.Get("text.tp0", kOpAllReduce).calls + 1);
      EXPECT_EQ(Describe(*oldest, oldest->start + std::chrono::seconds(31)),
                "all_reduce on group text.tp0 (call 3) for 31 s");
      while (!done) std::this_thread::sleep_for(milliseconds(10));
    }
  });
  EXPECT_EQ(InFlightRegistry::Global().size(), 0u);
}

TEST(InFlightCommunicatorTest, WaitingRecvNamesThePeerUntilTheSendArrives) {
  // The peer sends once it has seen the recv registered, well within the 5 s collective timeout
  // (a recv whose peer never sends fails at the timeout: silent_peer_test).
  InMemoryKvClient kv;
  std::atomic<bool> seen{false};
  RunRanks(2, [&](int rank) {
    CommStats stats;
    auto comm = MakeTestComm(kv, "world", 2, rank, &stats, milliseconds(5000));
    ASSERT_NE(comm, nullptr);
    ASSERT_TRUE(comm->Barrier().ok());  // barrier call 1; recv is numbered on its own
    if (rank == 0) {
      at::Tensor x = at::zeros({3});
      absl::Status s = comm->Recv(x, /*src_rank=*/1, /*tag=*/7);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(seen);
      EXPECT_TRUE(x.equal(at::full({3}, 5.0f)));
      EXPECT_FALSE(AnyOf("world", kOpRecv));
      EXPECT_EQ(stats.Get("world", kOpRecv).calls, 1);
    } else {
      std::optional<InFlightOp> op = WaitInFlight("world", kOpRecv, 1, milliseconds(4000));
      EXPECT_TRUE(op.has_value()) << "rank 0's recv never showed up in flight";
      seen = op.has_value();
      if (op.has_value()) {
        EXPECT_EQ(op->peer, 1);
        EXPECT_EQ(Describe(*op, op->start + std::chrono::milliseconds(1500)),
                  "recv from rank 1 on group world (call 1) for 1.5 s");
      }
      ASSERT_TRUE(comm->Send(at::full({3}, 5.0f), /*dst_rank=*/0, /*tag=*/7).ok());
    }
  });
  EXPECT_EQ(InFlightRegistry::Global().size(), 0u);
}

}  // namespace
}  // namespace dhp::comm
