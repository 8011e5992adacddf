#include "api/dhpctl/log_lines.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dhp::dhpctl {
namespace {

v1::LogChunk* AddChunk(v1::GetLogsResponse& resp, int rank, int64_t offset,
                       const std::string& data) {
  v1::LogChunk* c = resp.add_chunks();
  c->set_job_id("j-1");
  c->set_attempt(resp.attempt());
  c->set_world_rank(rank);
  c->set_offset(offset);
  c->set_data(data);
  return c;
}

std::vector<int32_t> Ranks(const v1::GetLogsRequest& req) {
  return {req.ranks().begin(), req.ranks().end()};
}
std::vector<int64_t> Offsets(const v1::GetLogsRequest& req) {
  return {req.offsets().begin(), req.offsets().end()};
}

TEST(LineAssemblerTest, CompleteLinesOnlyWithoutPrefix) {
  LineAssembler lines(/*prefix=*/false);
  EXPECT_EQ(lines.Add(0, "hello"), "");
  EXPECT_EQ(lines.Add(0, " world\nsecond"), "hello world\n");
  EXPECT_EQ(lines.Add(0, " line\nthird\nfour"), "second line\nthird\n");
  EXPECT_EQ(lines.Add(0, ""), "");
  EXPECT_EQ(lines.Flush(), "four\n");
  EXPECT_EQ(lines.Flush(), "");
}

TEST(LineAssemblerTest, PrefixesEachRankAndKeepsPartialLinesApart) {
  LineAssembler lines(/*prefix=*/true);
  EXPECT_EQ(lines.Add(0, "step 1 lo"), "");
  EXPECT_EQ(lines.Add(1, "step 1 loss 2.0\nstep 2"), "[rank 1] step 1 loss 2.0\n");
  EXPECT_EQ(lines.Add(0, "ss 1.9\n"), "[rank 0] step 1 loss 1.9\n");
  EXPECT_EQ(lines.Add(0, "\n"), "[rank 0] \n");  // an empty line is a line
  EXPECT_EQ(lines.Add(2, "no newline at the end"), "");
  EXPECT_EQ(lines.Flush(), "[rank 1] step 2\n[rank 2] no newline at the end\n");
}

TEST(LineAssemblerTest, OverlongPartialLineIsPrintedAnyway) {
  LineAssembler lines(/*prefix=*/false);
  const std::string big(LineAssembler::kMaxPartialBytes + 1, 'x');
  EXPECT_EQ(lines.Add(0, big), big + "\n");
  EXPECT_EQ(lines.Flush(), "");
}

TEST(LogCursorTest, ChosenRanksAskWithOffsets) {
  LogCursor cursor("j-1", 0, {3, 1});
  EXPECT_TRUE(cursor.MultiRank());
  v1::GetLogsRequest req = cursor.NextRequest();
  EXPECT_EQ(req.job_id(), "j-1");
  EXPECT_EQ(req.attempt(), 0);
  EXPECT_EQ(Ranks(req), (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(Offsets(req), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(req.max_bytes(), LogCursor::kMaxRankBytes);

  v1::GetLogsResponse resp;
  resp.set_attempt(2);
  AddChunk(resp, 3, 0, "three a\nthree b");
  AddChunk(resp, 1, 0, "one a\n");
  AddChunk(resp, 7, 0, "not asked for\n");
  LineAssembler lines(cursor.MultiRank());
  std::string out;
  LogCursor::Update u = cursor.Consume(resp, lines, &out);
  EXPECT_EQ(out, "[rank 1] one a\n[rank 3] three a\n");  // rank order
  EXPECT_EQ(u.new_bytes, 21);
  EXPECT_FALSE(u.full);
  EXPECT_EQ(cursor.attempt(), 2);  // from now on the attempt the server resolved

  req = cursor.NextRequest();
  EXPECT_EQ(req.attempt(), 2);
  EXPECT_EQ(Offsets(req), (std::vector<int64_t>{15, 6}));
  EXPECT_EQ(cursor.offset(7), 0);
}

TEST(LogCursorTest, OneChosenRankHasNoPrefix) {
  EXPECT_FALSE(LogCursor("j-1", 1, {2}).MultiRank());
  EXPECT_FALSE(LogCursor("j-1", 1, {2, 2}).MultiRank());
  LogCursor every("j-1", 1, {});
  EXPECT_TRUE(every.MultiRank());  // world size unknown
  every.set_world_size(1);
  EXPECT_FALSE(every.MultiRank());
  every.set_world_size(4);
  EXPECT_TRUE(every.MultiRank());
}

TEST(LogCursorTest, RepeatedAndOverlappingBytesAreSkipped) {
  LogCursor cursor("j-1", 1, {0});
  LineAssembler lines(false);
  std::string out;
  v1::GetLogsResponse resp;
  AddChunk(resp, 0, 0, "abc\n");
  cursor.Consume(resp, lines, &out);
  resp.clear_chunks();
  AddChunk(resp, 0, 0, "abc\ndef\n");  // starts before what was printed
  LogCursor::Update u = cursor.Consume(resp, lines, &out);
  EXPECT_EQ(u.new_bytes, 4);
  resp.clear_chunks();
  AddChunk(resp, 0, 8, "");  // nothing new
  EXPECT_EQ(cursor.Consume(resp, lines, &out).new_bytes, 0);
  EXPECT_EQ(out, "abc\ndef\n");
  EXPECT_EQ(cursor.offset(0), 8);
}

TEST(LogCursorTest, FullChunkMeansMoreIsWaiting) {
  LogCursor cursor("j-1", 1, {});
  cursor.set_world_size(2048);  // 2 MiB / 2048 ranks is below the minimum per rank
  v1::GetLogsRequest req = cursor.NextRequest();
  EXPECT_EQ(req.ranks_size(), 2048);
  EXPECT_EQ(req.max_bytes(), LogCursor::kMinRankBytes);
  v1::GetLogsResponse resp;
  AddChunk(resp, 5, 0, std::string(LogCursor::kMinRankBytes, 'x'));
  LineAssembler lines(true);
  std::string out;
  EXPECT_TRUE(cursor.Consume(resp, lines, &out).full);

  LogCursor two("j-1", 1, {});
  two.set_world_size(2);
  EXPECT_EQ(two.NextRequest().max_bytes(), LogCursor::kMaxRankBytes);
}

TEST(LogCursorTest, EveryRankWithKnownWorldSize) {
  LogCursor cursor("j-1", 1, {});
  cursor.set_world_size(3);
  v1::GetLogsRequest req = cursor.NextRequest();
  EXPECT_EQ(Ranks(req), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(Offsets(req), (std::vector<int64_t>{0, 0, 0}));
  v1::GetLogsResponse resp;
  AddChunk(resp, 1, 0, "one\n");
  AddChunk(resp, 4, 0, "a rank beyond the world size\n");
  LineAssembler lines(true);
  std::string out;
  cursor.Consume(resp, lines, &out);
  EXPECT_EQ(out, "[rank 1] one\n[rank 4] a rank beyond the world size\n");
  req = cursor.NextRequest();
  EXPECT_EQ(Ranks(req), (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(Offsets(req), (std::vector<int64_t>{0, 4, 0, 29}));
}

TEST(LogCursorTest, UnknownWorldSizeDiscoversRanks) {
  LogCursor cursor("j-1", 0, {});
  // Nothing seen: every rank, a little of each.
  v1::GetLogsRequest req = cursor.NextRequest();
  EXPECT_EQ(req.ranks_size(), 0);
  EXPECT_EQ(req.max_bytes(), LogCursor::kUnknownRanksBytes);
  v1::GetLogsResponse resp;
  resp.set_attempt(1);
  LineAssembler lines(true);
  std::string out;
  cursor.Consume(resp, lines, &out);  // no output yet
  req = cursor.NextRequest();
  EXPECT_EQ(req.ranks_size(), 0);
  AddChunk(resp, 0, 0, "zero\n");
  cursor.Consume(resp, lines, &out);
  // Then the ranks seen, with every kDiscoveryEvery-th request asking for all ranks again.
  int discovery = 0;
  for (int i = 0; i < LogCursor::kDiscoveryEvery; ++i) {
    req = cursor.NextRequest();
    if (req.ranks_size() == 0) {
      ++discovery;
      EXPECT_EQ(req.max_bytes(), 1);
    } else {
      EXPECT_EQ(Ranks(req), (std::vector<int32_t>{0}));
      EXPECT_EQ(Offsets(req), (std::vector<int64_t>{5}));
    }
  }
  EXPECT_EQ(discovery, 1);
  // A discovery reply: rank 0 from its start again (skipped), rank 2 is new.
  resp.clear_chunks();
  AddChunk(resp, 0, 0, "z");
  AddChunk(resp, 2, 0, "t");
  LogCursor::Update u = cursor.Consume(resp, lines, &out);
  EXPECT_EQ(u.new_bytes, 1);
  EXPECT_EQ(out, "[rank 0] zero\n");
  for (int i = 0; i < LogCursor::kDiscoveryEvery; ++i) {
    req = cursor.NextRequest();
    if (req.ranks_size() == 0) continue;
    EXPECT_EQ(Ranks(req), (std::vector<int32_t>{0, 2}));
    EXPECT_EQ(Offsets(req), (std::vector<int64_t>{5, 1}));
  }
  // On demand (a last look once the attempt ended), then back to the ranks seen.
  EXPECT_TRUE(cursor.discovering());
  cursor.DiscoverNext();
  EXPECT_EQ(cursor.NextRequest().ranks_size(), 0);
  EXPECT_EQ(cursor.NextRequest().ranks_size() + cursor.NextRequest().ranks_size(), 4);
  cursor.set_world_size(3);
  EXPECT_FALSE(cursor.discovering());
  cursor.DiscoverNext();  // no effect with a known world size
  EXPECT_EQ(Ranks(cursor.NextRequest()), (std::vector<int32_t>{0, 1, 2}));
}

}  // namespace
}  // namespace dhp::dhpctl
