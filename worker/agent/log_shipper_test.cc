#include "worker/agent/log_shipper.h"

#include <stdlib.h>

#include <fstream>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::worker {
namespace {

// The controller's side of AppendLogs: appends what extends the log it holds and answers with
// the size it holds (so a chunk past its end is refused, an overlap deduplicated).
struct FakeController {
  std::map<RankKey, std::string> held;
  std::vector<v1::AppendLogsRequest> requests;
  bool fail = false;
  bool wrong_sizes = false;

  absl::StatusOr<v1::AppendLogsResponse> Send(const v1::AppendLogsRequest& req) {
    requests.push_back(req);
    if (fail) return absl::UnavailableError("controller 127.0.0.1:1 unreachable");
    v1::AppendLogsResponse resp;
    for (const v1::LogChunk& c : req.chunks()) {
      std::string& log = held[{c.job_id(), c.attempt(), c.world_rank()}];
      const int64_t end = c.offset() + static_cast<int64_t>(c.data().size());
      if (c.offset() <= static_cast<int64_t>(log.size()) && end > static_cast<int64_t>(log.size())) {
        log += c.data().substr(log.size() - c.offset());
      }
      resp.add_sizes(static_cast<int64_t>(log.size()));
    }
    if (wrong_sizes) resp.add_sizes(0);
    return resp;
  }
};

class LogShipperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/log_shipper_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    options_.node_id = "node-a";
  }
  LogShipper MakeShipper() {
    return LogShipper(options_, [this](const v1::AppendLogsRequest& r) { return fake_.Send(r); });
  }
  RankLog Log(const std::string& job, int rank) {
    return {{job, 1, rank}, dir_ + "/" + job + "-" + std::to_string(rank) + ".log"};
  }
  static void Append(const RankLog& log, const std::string& data) {
    std::ofstream(log.path, std::ios::app) << data;
  }

  std::string dir_;
  LogShipperOptions options_;
  FakeController fake_;
};

TEST_F(LogShipperTest, ChunksRespectTheChunkAndRequestLimitsAndArriveInOrder) {
  options_.max_chunk_bytes = 10;
  options_.max_request_bytes = 25;
  options_.max_calls_per_round = 100;
  LogShipper shipper = MakeShipper();
  std::vector<RankLog> logs = {Log("a", 0), Log("a", 1), Log("b", 0)};
  const std::vector<std::string> contents = {std::string(47, 'x') + "\n", "short\n",
                                             "0123456789abcdefghijklmnopqrstuvwxyz\n"};
  for (size_t i = 0; i < logs.size(); ++i) Append(logs[i], contents[i]);
  shipper.Track(logs);
  ASSERT_TRUE(shipper.Ship().ok());
  for (size_t i = 0; i < logs.size(); ++i) {
    EXPECT_EQ(fake_.held[logs[i].key], contents[i]);
    EXPECT_EQ(shipper.acknowledged(logs[i].key), static_cast<int64_t>(contents[i].size()));
  }
  for (const v1::AppendLogsRequest& req : fake_.requests) {
    EXPECT_EQ(req.node_id(), "node-a");
    int64_t total = 0;
    std::set<RankKey> keys;
    for (const v1::LogChunk& c : req.chunks()) {
      EXPECT_LE(c.data().size(), 10u);
      EXPECT_TRUE(keys.insert({c.job_id(), c.attempt(), c.world_rank()}).second);
      total += static_cast<int64_t>(c.data().size());
    }
    EXPECT_LE(total, 25);
  }
  EXPECT_EQ(fake_.requests.size(), 5u);  // 48 bytes of a/0 in chunks of 10
  const size_t calls = fake_.requests.size();
  ASSERT_TRUE(shipper.Ship().ok());  // nothing new: no call
  EXPECT_EQ(fake_.requests.size(), calls);
  Append(logs[1], "more\n");
  ASSERT_TRUE(shipper.Ship().ok());
  ASSERT_EQ(fake_.requests.size(), calls + 1);
  ASSERT_EQ(fake_.requests.back().chunks_size(), 1);
  EXPECT_EQ(fake_.requests.back().chunks(0).offset(), 6);
  EXPECT_EQ(fake_.held[logs[1].key], "short\nmore\n");
}

TEST_F(LogShipperTest, StopsAfterMaxCallsPerRoundAndGoesOnNextRound) {
  options_.max_chunk_bytes = 4;
  options_.max_calls_per_round = 2;
  LogShipper shipper = MakeShipper();
  RankLog log = Log("a", 0);
  Append(log, "0123456789");
  shipper.Track({log});
  ASSERT_TRUE(shipper.Ship().ok());
  EXPECT_EQ(fake_.held[log.key], "01234567");
  ASSERT_TRUE(shipper.Ship().ok());
  EXPECT_EQ(fake_.held[log.key], "0123456789");
  EXPECT_EQ(fake_.requests.size(), 3u);
}

TEST_F(LogShipperTest, ResendsFromTheSizeTheControllerHolds) {
  LogShipper shipper = MakeShipper();
  RankLog log = Log("a", 0);
  Append(log, "first line\n");
  shipper.Track({log});
  ASSERT_TRUE(shipper.Ship().ok());
  EXPECT_EQ(shipper.acknowledged(log.key), 11);
  fake_.held.clear();  // a controller restart lost the log
  Append(log, "second line\n");
  ASSERT_TRUE(shipper.Ship().ok());
  ASSERT_EQ(fake_.requests.size(), 3u);
  EXPECT_EQ(fake_.requests[1].chunks(0).offset(), 11);  // refused: it holds 0
  EXPECT_EQ(fake_.requests[2].chunks(0).offset(), 0);   // resent from there
  EXPECT_EQ(fake_.held[log.key], "first line\nsecond line\n");
}

TEST_F(LogShipperTest, SkipsAheadWhenTheControllerHoldsMore) {
  LogShipper shipper = MakeShipper();
  RankLog log = Log("a", 0);
  fake_.held[log.key] = "01234567";
  Append(log, "01234");
  shipper.Track({log});
  ASSERT_TRUE(shipper.Ship().ok());
  EXPECT_EQ(shipper.acknowledged(log.key), 8);
  ASSERT_TRUE(shipper.Ship().ok());  // nothing past 8 yet
  EXPECT_EQ(fake_.requests.size(), 1u);
  Append(log, "56789");
  ASSERT_TRUE(shipper.Ship().ok());
  ASSERT_EQ(fake_.requests.size(), 2u);
  EXPECT_EQ(fake_.requests[1].chunks(0).offset(), 8);
  EXPECT_EQ(fake_.requests[1].chunks(0).data(), "89");
  EXPECT_EQ(fake_.held[log.key], "0123456789");
}

TEST_F(LogShipperTest, RetriesAfterErrorsAndShipsLogsOfForgottenRanksToTheEnd) {
  LogShipper shipper = MakeShipper();
  RankLog a = Log("a", 0), b = Log("b", 0);
  Append(a, "a output\n");
  Append(b, "b output\n");
  shipper.Track({a, b});
  fake_.fail = true;
  absl::Status status = shipper.Ship();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(shipper.acknowledged(a.key), 0);
  Append(a, "last words\n");
  shipper.Track({b});  // a exited and the launcher forgot it
  EXPECT_FALSE(shipper.Ship().ok());
  EXPECT_EQ(shipper.tracked(), 2u);  // a is kept until shipped

  fake_.fail = false;
  fake_.wrong_sizes = true;  // a malformed answer keeps the offsets too
  EXPECT_EQ(shipper.Ship().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(shipper.acknowledged(a.key), 0);
  fake_.held.clear();

  fake_.wrong_sizes = false;
  ASSERT_TRUE(shipper.Ship().ok());
  EXPECT_EQ(fake_.held[a.key], "a output\nlast words\n");
  EXPECT_EQ(fake_.held[b.key], "b output\n");
  EXPECT_EQ(shipper.tracked(), 1u);  // a fully shipped: dropped
  EXPECT_EQ(shipper.acknowledged(a.key), std::nullopt);
  EXPECT_EQ(shipper.acknowledged(b.key), 9);
}

TEST_F(LogShipperTest, ResyncAsksForTheControllerSizeWithoutNewOutput) {
  LogShipper shipper = MakeShipper();
  RankLog log = Log("a", 0);
  Append(log, "all of it\n");
  shipper.Track({log});
  ASSERT_TRUE(shipper.Ship().ok());
  fake_.held.clear();  // a controller restart lost the log; nothing new to send
  ASSERT_TRUE(shipper.Ship().ok());
  EXPECT_EQ(fake_.requests.size(), 1u);
  shipper.Resync();
  ASSERT_TRUE(shipper.Ship().ok());
  ASSERT_EQ(fake_.requests.size(), 3u);
  EXPECT_EQ(fake_.requests[1].chunks(0).offset(), 10);  // the probe: an empty chunk
  EXPECT_EQ(fake_.requests[1].chunks(0).data(), "");
  EXPECT_EQ(fake_.requests[2].chunks(0).offset(), 0);
  EXPECT_EQ(fake_.held[log.key], "all of it\n");
  ASSERT_TRUE(shipper.Ship().ok());  // probed once only
  EXPECT_EQ(fake_.requests.size(), 3u);
}

TEST_F(LogShipperTest, MissingLogsSendNothing) {
  LogShipper shipper = MakeShipper();
  RankLog log = Log("a", 0);  // never written
  shipper.Track({log});
  ASSERT_TRUE(shipper.Ship().ok());
  EXPECT_TRUE(fake_.requests.empty());
  EXPECT_EQ(shipper.tracked(), 1u);
  shipper.Track({});
  ASSERT_TRUE(shipper.Ship().ok());
  EXPECT_EQ(shipper.tracked(), 0u);
}

TEST_F(LogShipperTest, AdoptedLogsAskTheHeldSizeFirstThenShipTheRestAndAreDropped) {
  options_.max_calls_per_round = 100;
  LogShipper shipper = MakeShipper();
  const RankLog left = Log("a", 0), resumed = Log("a", 1), live = Log("b", 0);
  Append(left, "0123456789abcdef\n");
  Append(resumed, "first\nsecond\n");
  Append(live, "live\n");
  fake_.held[left.key] = "0123456789";  // shipped by the agent before this one
  shipper.Track({live});
  shipper.Adopt({left, resumed, live});  // `live` is tracked already: kept as it is
  ASSERT_TRUE(shipper.Ship().ok());
  ASSERT_FALSE(fake_.requests.empty());
  const v1::AppendLogsRequest& first = fake_.requests[0];
  ASSERT_EQ(first.chunks_size(), 3);
  for (const v1::LogChunk& c : first.chunks()) {
    if (c.job_id() == "a") {  // the adopted ones: an empty chunk at 0 asks for the held size
      EXPECT_EQ(c.offset(), 0);
      EXPECT_EQ(c.data(), "");
    } else {
      EXPECT_EQ(c.data(), "live\n");
    }
  }
  EXPECT_EQ(fake_.held[left.key], "0123456789abcdef\n");
  EXPECT_EQ(fake_.held[resumed.key], "first\nsecond\n");
  EXPECT_EQ(shipper.tracked(), 1u);  // the adopted logs are done and dropped; `live` stays
  int64_t resent = 0;  // no byte the controller held was sent again
  for (const v1::AppendLogsRequest& req : fake_.requests) {
    for (const v1::LogChunk& c : req.chunks()) {
      if (c.job_id() == "a" && c.world_rank() == 0 && c.offset() < 10) resent += c.data().size();
    }
  }
  EXPECT_EQ(resent, 0);
}

TEST_F(LogShipperTest, ManyAdoptedLogsAreProbedInBoundedRequests) {
  options_.max_chunks_per_request = 4;
  options_.max_calls_per_round = 100;
  LogShipper shipper = MakeShipper();
  std::vector<RankLog> logs;
  for (int r = 0; r < 10; ++r) {
    logs.push_back(Log("many", r));
    Append(logs.back(), "rank " + std::to_string(r) + "\n");
  }
  shipper.Adopt(logs);
  ASSERT_TRUE(shipper.Ship().ok());
  for (const v1::AppendLogsRequest& req : fake_.requests) EXPECT_LE(req.chunks_size(), 4);
  for (int r = 0; r < 10; ++r) EXPECT_EQ(fake_.held[logs[r].key], "rank " + std::to_string(r) + "\n");
  EXPECT_EQ(shipper.tracked(), 0u);
}

}  // namespace
}  // namespace dhp::worker
