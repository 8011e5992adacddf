// A peer that never answers (hung, stopped, or its host gone without closing the connection):
// with real Gloo (ranks as threads), every operation that waits on it, send and recv included,
// fails with DEADLINE_EXCEEDED once the group's collective timeout has passed (Gloo's context
// timeout, which ProcessGroupGloo sets from ProcessGroupsOptions::collective_timeout), never
// later; a message that arrives within the timeout is still received. A peer process that was
// killed fails them at once instead (cross_process_test).
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/comm/comm_test_util.h"
#include "worker/comm/rank_threads.h"

namespace dhp::comm {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

// Slack past the timeout for a loaded 2-core machine (scheduling, Gloo closing its pairs).
constexpr milliseconds kMargin(2000);

milliseconds Since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
}

struct Outcome {
  absl::Status status = absl::UnknownError("rank 0 did not run the operation");
  milliseconds elapsed{0};
};

// On a fresh 2-rank Gloo group "world" with collective timeout `timeout`, rank 0 runs `op` while
// rank 1, alive with its communicator open, stays silent until rank 0 is done. Both ranks pass
// one barrier first, so the group is connected when `op` starts.
Outcome AgainstASilentPeer(milliseconds timeout,
                           const std::function<absl::Status(Communicator&)>& op) {
  InMemoryKvClient kv;
  std::atomic<bool> done{false};
  Outcome out;
  RunRanks(2, [&](int rank) {
    CommStats stats;
    std::unique_ptr<Communicator> comm = MakeTestComm(kv, "world", 2, rank, &stats, timeout);
    if (rank == 0) {
      if (comm != nullptr) {
        if (absl::Status b = comm->Barrier(); b.ok()) {
          const Clock::time_point t0 = Clock::now();
          out.status = op(*comm);
          out.elapsed = Since(t0);
        } else {
          ADD_FAILURE() << b;
        }
      }
      done = true;
      return;
    }
    if (comm == nullptr || !comm->Barrier().ok()) return;
    // Silent, but never forever: rank 0's operation has long failed by then.
    const Clock::time_point deadline = Clock::now() + timeout + std::chrono::seconds(30);
    while (!done && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(10));
  });
  return out;
}

// The operation waited for the timeout, and not much longer.
void ExpectEndedAtTheTimeout(const Outcome& o, milliseconds timeout) {
  EXPECT_GE(o.elapsed.count(), timeout.count() * 9 / 10) << "ended before the timeout: " << o.status;
  EXPECT_LE(o.elapsed.count(), (timeout + kMargin).count()) << o.status;
}

TEST(SilentPeerTest, RecvFailsAtTheCollectiveTimeout) {
  const milliseconds timeout(1500);
  Outcome o = AgainstASilentPeer(timeout, [](Communicator& c) {
    at::Tensor x = at::zeros({3});
    return c.Recv(x, /*src_rank=*/1, /*tag=*/7);
  });
  EXPECT_TRUE(absl::IsDeadlineExceeded(o.status)) << o.status;
  // The operation, the group, this rank and the peer, then the backend's words with the timeout.
  EXPECT_THAT(std::string(o.status.message()),
              StartsWith("recv on group world (rank 0 of 2) from rank 1: "));
  EXPECT_THAT(std::string(o.status.message()), HasSubstr("1500ms"));
  ExpectEndedAtTheTimeout(o, timeout);
}

TEST(SilentPeerTest, SendFailsAtTheCollectiveTimeout) {
  // Gloo sends only into a posted recv, so a send to a peer that never receives waits too.
  const milliseconds timeout(1500);
  Outcome o = AgainstASilentPeer(timeout, [](Communicator& c) {
    return c.Send(at::ones({3}), /*dst_rank=*/1, /*tag=*/7);
  });
  EXPECT_TRUE(absl::IsDeadlineExceeded(o.status)) << o.status;
  EXPECT_THAT(std::string(o.status.message()),
              StartsWith("send on group world (rank 0 of 2) to rank 1: "));
  EXPECT_THAT(std::string(o.status.message()), HasSubstr("1500ms"));
  ExpectEndedAtTheTimeout(o, timeout);
}

TEST(SilentPeerTest, ALateSendWithinTheTimeoutIsReceived) {
  const milliseconds timeout(3000), delay(1000);
  InMemoryKvClient kv;
  RunRanks(2, [&](int rank) {
    CommStats stats;
    std::unique_ptr<Communicator> comm = MakeTestComm(kv, "world", 2, rank, &stats, timeout);
    ASSERT_NE(comm, nullptr);
    ASSERT_TRUE(comm->Barrier().ok());
    if (rank == 0) {
      at::Tensor x = at::zeros({3});
      const Clock::time_point t0 = Clock::now();
      absl::Status s = comm->Recv(x, /*src_rank=*/1, /*tag=*/7);
      const milliseconds elapsed = Since(t0);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(x.equal(at::full({3}, 5.0f)));
      EXPECT_GE(elapsed.count(), delay.count() * 9 / 10);
      EXPECT_EQ(stats.Get("world", kOpRecv).calls, 1);
    } else {
      std::this_thread::sleep_for(delay);
      ASSERT_TRUE(comm->Send(at::full({3}, 5.0f), /*dst_rank=*/0, /*tag=*/7).ok());
    }
    // The group is still usable afterwards.
    at::Tensor y = at::ones({2});
    ASSERT_TRUE(comm->AllReduce(y, ReduceOp::kSum).ok());
    EXPECT_TRUE(y.equal(at::full({2}, 2.0f)));
  });
}

TEST(SilentPeerTest, EveryCollectiveFailsAtTheCollectiveTimeout) {
  const milliseconds timeout(1000);
  struct Case {
    std::string op;  // comm_stats.h's name, as the message starts with it
    std::function<absl::Status(Communicator&)> run;
  };
  const std::vector<Case> cases = {
      {kOpAllReduce,
       [](Communicator& c) {
         at::Tensor x = at::ones({4});
         return c.AllReduce(x, ReduceOp::kSum);
       }},
      {kOpAllGather, [](Communicator& c) { return c.AllGather(at::ones({2, 3})).status(); }},
      {kOpReduceScatter,
       [](Communicator& c) { return c.ReduceScatter(at::ones({4, 3})).status(); }},
      {kOpAllToAll, [](Communicator& c) { return c.AllToAll(at::ones({4, 3})).status(); }},
      {kOpAllToAll,  // uneven
       [](Communicator& c) {
         return c.AllToAllV(at::ones({3, 2}), /*send_rows=*/{1, 2}, /*recv_rows=*/{1, 1}).status();
       }},
      {kOpBroadcast,  // from the silent rank
       [](Communicator& c) {
         at::Tensor x = at::zeros({4});
         return c.Broadcast(x, /*root=*/1);
       }},
      {kOpBroadcast,  // to the silent rank
       [](Communicator& c) {
         at::Tensor x = at::ones({4});
         return c.Broadcast(x, /*root=*/0);
       }},
      {kOpBarrier, [](Communicator& c) { return c.Barrier(); }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "case " << i << ": " << cases[i].op);
    Outcome o = AgainstASilentPeer(timeout, cases[i].run);
    EXPECT_TRUE(absl::IsDeadlineExceeded(o.status)) << o.status;
    EXPECT_THAT(std::string(o.status.message()),
                StartsWith(cases[i].op + " on group world (rank 0 of 2): "));
    ExpectEndedAtTheTimeout(o, timeout);
  }
}

TEST(SilentPeerTest, AfterATimeoutTheGroupFailsFastInsteadOfWaitingAgain) {
  // Gloo closes every connection of the group when an operation times out, so later operations
  // fail at once (UNAVAILABLE) rather than each waiting out the timeout again: the rank stops.
  const milliseconds timeout(1000);
  Outcome o = AgainstASilentPeer(timeout, [&](Communicator& c) {
    at::Tensor x = at::zeros({3});
    absl::Status first = c.Recv(x, /*src_rank=*/1, /*tag=*/7);
    EXPECT_TRUE(absl::IsDeadlineExceeded(first)) << first;
    const Clock::time_point t0 = Clock::now();
    absl::Status second = c.AllReduce(x, ReduceOp::kSum);
    EXPECT_LT(Since(t0).count(), timeout.count()) << second;
    return second;
  });
  EXPECT_FALSE(o.status.ok());
  EXPECT_THAT(std::string(o.status.message()),
              StartsWith("all_reduce on group world (rank 0 of 2): "));
}

}  // namespace
}  // namespace dhp::comm
