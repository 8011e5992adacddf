// Collectives over real Gloo process groups: world sizes 2 and 4, one thread per rank, exact
// values and exact byte counters. The counters are bytes by tensor size (comm_stats.h), so the
// expected numbers are literals worked out by hand here, never the Volume functions under test.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "worker/comm/comm_test_util.h"
#include "worker/comm/local_communicator.h"
#include "worker/comm/rank_threads.h"
#include "worker/comm/split_sizes.h"

namespace dhp::comm {
namespace {

using ::testing::HasSubstr;

at::Tensor F(std::vector<float> v) { return at::tensor(v, at::kFloat); }

class CommunicatorTest : public ::testing::TestWithParam<int> {
 protected:
  int P() const { return GetParam(); }
  // Runs body(comm, stats) on every rank of a fresh group "g".
  void Run(const std::function<void(Communicator&, CommStats&)>& body) {
    InMemoryKvClient kv;
    RunRanks(P(), [&](int rank) {
      CommStats stats;
      std::unique_ptr<Communicator> comm = MakeTestComm(kv, "g", P(), rank, &stats);
      ASSERT_NE(comm, nullptr);
      ASSERT_EQ(comm->rank(), rank);
      ASSERT_EQ(comm->size(), P());
      body(*comm, stats);
    });
  }
};

TEST_P(CommunicatorTest, AllReduceSumAndMax) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    const int r = c.rank();
    at::Tensor x = at::arange(6, at::kFloat) + 10 * r;  // 24 bytes
    ASSERT_TRUE(c.AllReduce(x, ReduceOp::kSum).ok());
    EXPECT_TRUE(x.equal(at::arange(6, at::kFloat) * p + 10 * (p * (p - 1) / 2)));
    at::Tensor m = at::arange(6, at::kFloat) + 10 * r;
    ASSERT_TRUE(c.AllReduce(m, ReduceOp::kMax).ok());
    EXPECT_TRUE(m.equal(at::arange(6, at::kFloat) + 10 * (p - 1)));
    // Ring formula 2N(P-1)/P per call, N = 24 B: P = 2: 2*24*1/2 = 24; P = 4: 2*24*3/4 = 36.
    // Two calls: 48 (P = 2), 72 (P = 4) each way.
    const int64_t two_calls = p == 2 ? 48 : 72;
    EXPECT_EQ(stats.Get("g", kOpAllReduce), (CommCounters{2, two_calls, two_calls}));
  });
}

TEST_P(CommunicatorTest, AllReduceNonContiguousInPlace) {
  const int p = P();
  Run([p](Communicator& c, CommStats&) {
    at::Tensor base = at::ones({3, 4}, at::kFloat) * (c.rank() + 1);
    at::Tensor view = base.t();  // non-contiguous view, reduced in place
    ASSERT_TRUE(c.AllReduce(view, ReduceOp::kSum).ok());
    EXPECT_TRUE(base.equal(at::full({3, 4}, p * (p + 1) / 2.0, at::kFloat)));
  });
}

TEST_P(CommunicatorTest, AllReduceBf16TravelsAsFp32) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    at::Tensor x = (at::arange(8, at::kFloat) + c.rank()).to(at::kBFloat16);  // 16 bytes
    ASSERT_TRUE(c.AllReduce(x, ReduceOp::kSum).ok());
    EXPECT_EQ(x.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(x.to(at::kFloat).equal(at::arange(8, at::kFloat) * p + p * (p - 1) / 2));
    // Gloo cannot reduce bf16: the communicator reduces fp32, so N = 32 bytes, not 16:
    // P = 2: 2*32*1/2 = 32; P = 4: 2*32*3/4 = 48 (with bf16's 16 B it would be 16 / 24).
    EXPECT_EQ(stats.Get("g", kOpAllReduce).tensor_bytes_sent, p == 2 ? 32 : 48);
  });
}

TEST_P(CommunicatorTest, AllGatherEven) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    at::Tensor x = at::full({2, 3}, c.rank(), at::kFloat);  // 24 bytes per rank
    absl::StatusOr<at::Tensor> y = c.AllGather(x);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->sizes(), (std::vector<int64_t>{2 * p, 3}));
    for (int q = 0; q < p; ++q) EXPECT_TRUE(y->narrow(0, 2 * q, 2).eq(q).all().item<bool>());
    // N(P-1), N = 24 B: P = 2: 24; P = 4: 72.
    const int64_t v = p == 2 ? 24 : 72;
    EXPECT_EQ(stats.Get("g", kOpAllGather), (CommCounters{1, v, v}));
  });
}

TEST_P(CommunicatorTest, AllGatherBf16MovesTwoBytesPerElement) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    at::Tensor x = at::full({4}, 1.5 + c.rank(), at::kBFloat16);  // 8 bytes
    absl::StatusOr<at::Tensor> y = c.AllGather(x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->scalar_type(), at::kBFloat16);
    for (int q = 0; q < p; ++q) {
      EXPECT_TRUE(y->narrow(0, 4 * q, 4).to(at::kFloat).eq(1.5 + q).all().item<bool>());
    }
    // N(P-1), N = 8 B: P = 2: 8; P = 4: 24.
    EXPECT_EQ(stats.Get("g", kOpAllGather).tensor_bytes_sent, p == 2 ? 8 : 24);
  });
}

TEST_P(CommunicatorTest, AllGatherUnevenPadsToTheLargest) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    std::vector<int64_t> rows;
    for (int q = 0; q < p; ++q) rows.push_back(q + 1);  // rank q has q+1 rows of 2 floats
    at::Tensor x = at::full({c.rank() + 1, 2}, c.rank(), at::kFloat);
    absl::StatusOr<at::Tensor> y = c.AllGatherV(x, rows);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->size(0), p * (p + 1) / 2);
    int64_t off = 0;
    for (int q = 0; q < p; ++q) {
      EXPECT_TRUE(y->narrow(0, off, q + 1).eq(q).all().item<bool>()) << "from rank " << q;
      off += q + 1;
    }
    // Every rank's input travels padded to the largest (P rows of 8 B) to each of P-1 peers:
    // P = 2: 2 rows * 8 B * 1 peer = 16; P = 4: 4 * 8 * 3 = 96.
    const int64_t v = p == 2 ? 16 : 96;
    EXPECT_EQ(stats.Get("g", kOpAllGather), (CommCounters{1, v, v}));
  });
}

TEST_P(CommunicatorTest, ReduceScatterEven) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    // Rank q contributes (q+1) * [0, 1, ..., 2p*3-1]; 2 rows of 3 per chunk.
    at::Tensor x = at::arange(2 * p * 3, at::kFloat).view({2 * p, 3}) * (c.rank() + 1);
    absl::StatusOr<at::Tensor> y = c.ReduceScatter(x);
    ASSERT_TRUE(y.ok()) << y.status();
    at::Tensor expected =
        at::arange(2 * p * 3, at::kFloat).view({2 * p, 3}).narrow(0, 2 * c.rank(), 2) *
        (p * (p + 1) / 2);
    EXPECT_TRUE(y->equal(expected));
    // N(P-1)/P, N = 2P rows * 3 floats * 4 B: P = 2: N = 48, 48*1/2 = 24; P = 4: N = 96,
    // 96*3/4 = 72.
    const int64_t v = p == 2 ? 24 : 72;
    EXPECT_EQ(stats.Get("g", kOpReduceScatter), (CommCounters{1, v, v}));
  });
}

TEST_P(CommunicatorTest, ReduceScatterUnevenAndBf16) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    std::vector<int64_t> rows;
    int64_t total = 0;
    for (int q = 0; q < p; ++q) {
      rows.push_back(q % 2 == 0 ? 1 : 3);
      total += rows.back();
    }
    at::Tensor x =
        (at::arange(total * 2, at::kFloat).view({total, 2}) + c.rank()).to(at::kBFloat16);
    absl::StatusOr<at::Tensor> y = c.ReduceScatterV(x, rows);
    ASSERT_TRUE(y.ok()) << y.status();
    const std::vector<int64_t> off = RowOffsets(rows);
    at::Tensor expected = at::arange(total * 2, at::kFloat)
                                  .view({total, 2})
                                  .narrow(0, off[c.rank()], rows[c.rank()]) *
                              p +
                          p * (p - 1) / 2;
    EXPECT_EQ(y->scalar_type(), at::kBFloat16);
    EXPECT_TRUE(y->to(at::kFloat).equal(expected));
    // bf16 travels as 2 bytes (only moved, summed locally): a row of 2 is 4 B. Sent = the
    // chunks for the others, received = (P-1) * own chunk. Rows {1, 3} (P = 2, 4 rows) or
    // {1, 3, 1, 3} (P = 4, 8 rows); a rank owning 1 row / 3 rows:
    //   P = 2: sent (4-1)*4 = 12 / (4-3)*4 = 4;   received 1*1*4 = 4 / 1*3*4 = 12
    //   P = 4: sent (8-1)*4 = 28 / (8-3)*4 = 20;  received 3*1*4 = 12 / 3*3*4 = 36
    const bool one_row = c.rank() % 2 == 0;
    const CommCounters want = p == 2
                                  ? (one_row ? CommCounters{1, 12, 4} : CommCounters{1, 4, 12})
                                  : (one_row ? CommCounters{1, 28, 12} : CommCounters{1, 20, 36});
    EXPECT_EQ(stats.Get("g", kOpReduceScatter), want);
  });
}

TEST_P(CommunicatorTest, AllToAllEven) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    const int r = c.rank();
    at::Tensor x = at::arange(2 * p, at::kFloat) + 100 * r;  // chunk j = rows 2j, 2j+1
    absl::StatusOr<at::Tensor> y = c.AllToAll(x);
    ASSERT_TRUE(y.ok()) << y.status();
    for (int q = 0; q < p; ++q) {
      EXPECT_TRUE(y->narrow(0, 2 * q, 2).equal(F({100.f * q + 2 * r, 100.f * q + 2 * r + 1})));
    }
    // N(P-1)/P, N = 2P floats * 4 B: P = 2: N = 16, 16*1/2 = 8; P = 4: N = 32, 32*3/4 = 24.
    const int64_t v = p == 2 ? 8 : 24;
    EXPECT_EQ(stats.Get("g", kOpAllToAll), (CommCounters{1, v, v}));
  });
}

TEST_P(CommunicatorTest, AllToAllUnevenWithEmptyChunks) {
  const int p = P();
  // Rows from src to dst; some are zero.
  auto count = [](int src, int dst) -> int64_t { return (src + 2 * dst) % 3; };
  Run([p, count](Communicator& c, CommStats& stats) {
    const int r = c.rank();
    std::vector<int64_t> send, recv;
    std::vector<at::Tensor> parts;
    for (int j = 0; j < p; ++j) {
      send.push_back(count(r, j));
      recv.push_back(count(j, r));
      // Row k of the chunk for j: [1000 r + 100 j + k, -1].
      at::Tensor col = at::arange(send.back(), at::kFloat) + 1000 * r + 100 * j;
      parts.push_back(at::stack({col, -at::ones_like(col)}, 1));
    }
    at::Tensor x = at::cat(parts);
    absl::StatusOr<at::Tensor> y = c.AllToAllV(x, send, recv);
    ASSERT_TRUE(y.ok()) << y.status();
    int64_t off = 0, sent = 0, received = 0;
    for (int j = 0; j < p; ++j) {
      at::Tensor col = at::arange(recv[j], at::kFloat) + 1000 * j + 100 * r;
      EXPECT_TRUE(y->narrow(0, off, recv[j]).equal(at::stack({col, -at::ones_like(col)}, 1)))
          << "chunk from rank " << j;
      off += recv[j];
      if (j != r) {
        sent += send[j] * 8;
        received += recv[j] * 8;
      }
    }
    EXPECT_EQ(stats.Get("g", kOpAllToAll), (CommCounters{1, sent, received}));
  });
}

TEST_P(CommunicatorTest, BroadcastFromRankOne) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    at::Tensor x = c.rank() == 1 ? F({7, 8, 9}) : at::zeros({3}, at::kFloat);
    ASSERT_TRUE(c.Broadcast(x, 1).ok());
    EXPECT_TRUE(x.equal(F({7, 8, 9})));
    // N = 12 B; the root sends N to each of P-1 peers: P = 2: 12; P = 4: 36.
    CommCounters expect =
        c.rank() == 1 ? CommCounters{1, p == 2 ? 12 : 36, 0} : CommCounters{1, 0, 12};
    EXPECT_EQ(stats.Get("g", kOpBroadcast), expect);
  });
}

TEST_P(CommunicatorTest, SendRecvRing) {
  const int p = P();
  Run([p](Communicator& c, CommStats& stats) {
    const int r = c.rank();
    const int next = (r + 1) % p, prev = (r + p - 1) % p;
    at::Tensor out = at::full({5}, r, at::kFloat);
    at::Tensor in = at::empty({5}, at::kFloat);
    if (r % 2 == 0) {
      ASSERT_TRUE(c.Send(out, next, 3).ok());
      ASSERT_TRUE(c.Recv(in, prev, 3).ok());
    } else {
      ASSERT_TRUE(c.Recv(in, prev, 3).ok());
      ASSERT_TRUE(c.Send(out, next, 3).ok());
    }
    EXPECT_TRUE(in.eq(prev).all().item<bool>());
    EXPECT_EQ(stats.Get("g", kOpSend), (CommCounters{1, 20, 0}));
    EXPECT_EQ(stats.Get("g", kOpRecv), (CommCounters{1, 0, 20}));
    EXPECT_TRUE(absl::IsInvalidArgument(c.Send(out, r, 0)));  // not a peer
  });
}

TEST_P(CommunicatorTest, BarrierCountsCallsNotBytes) {
  Run([](Communicator& c, CommStats& stats) {
    ASSERT_TRUE(c.Barrier().ok());
    ASSERT_TRUE(c.Barrier().ok());
    EXPECT_EQ(stats.Get("g", kOpBarrier), (CommCounters{2, 0, 0}));
  });
}

TEST_P(CommunicatorTest, BadRowCountsFailBeforeCommunicating) {
  Run([](Communicator& c, CommStats& stats) {
    at::Tensor x = at::zeros({2, 2});
    std::vector<int64_t> wrong(c.size(), 3);  // own entry says 3, input has 2
    absl::Status s = c.AllGatherV(x, wrong).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("all_gather on group g (rank"));
    EXPECT_TRUE(absl::IsInvalidArgument(c.ReduceScatter(at::zeros({3})).status()));  // 3 % P
    EXPECT_EQ(stats.Total().calls, 0);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CommunicatorTest, ::testing::Values(2, 4),
                         [](const auto& info) { return "P" + std::to_string(info.param); });

TEST(CommunicatorTimeoutTest, StalledPeerBecomesDeadlineExceededNamingTheGroup) {
  InMemoryKvClient kv;
  std::atomic<bool> done{false};
  RunRanks(2, [&](int rank) {
    CommStats stats;
    auto comm = MakeTestComm(kv, "text.tp0", 2, rank, &stats, std::chrono::milliseconds(500));
    ASSERT_NE(comm, nullptr);
    if (rank == 0) {
      at::Tensor x = at::ones({4});
      absl::Status s = comm->AllReduce(x, ReduceOp::kSum);  // rank 1 never joins
      EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr("all_reduce on group text.tp0 (rank 0 of 2)"));
      EXPECT_EQ(stats.Total().calls, 0);
      done = true;
    } else {
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
}

TEST(LocalCommunicatorTest, EverythingIsLocalAndCountsZeroBytes) {
  CommStats stats;
  LocalCommunicator c("vision.sp0", &stats);
  at::Tensor x = F({1, 2, 3});
  ASSERT_TRUE(c.AllReduce(x, ReduceOp::kSum).ok());
  EXPECT_TRUE(x.equal(F({1, 2, 3})));
  absl::StatusOr<at::Tensor> g = c.AllGather(x);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->equal(x));
  EXPECT_FALSE(g->is_same(x));  // a new tensor
  EXPECT_TRUE(c.ReduceScatter(x)->equal(x));
  EXPECT_TRUE(c.AllToAll(x)->equal(x));
  EXPECT_TRUE(c.Broadcast(x, 0).ok());
  EXPECT_TRUE(c.Barrier().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(c.Send(x, 1, 0)));
  EXPECT_EQ(stats.GroupTotal("vision.sp0"), (CommCounters{6, 0, 0}));
}

}  // namespace
}  // namespace dhp::comm
