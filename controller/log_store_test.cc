#include "controller/log_store.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

v1::LogChunk Chunk(const std::string& job, int attempt, int rank, int64_t offset,
                   const std::string& data) {
  v1::LogChunk c;
  c.set_job_id(job);
  c.set_attempt(attempt);
  c.set_world_rank(rank);
  c.set_offset(offset);
  c.set_data(data);
  return c;
}

class LogStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/log_store_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string FileContents(const std::string& relative) {
    std::ifstream in(root_ + "/" + relative, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
  }
  std::string ReadAll(LogStore& store, const std::string& job, int attempt, int rank) {
    absl::StatusOr<v1::LogChunk> c = store.Read(job, attempt, rank, 0, LogStore::kMaxReadBytes);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->data() : "";
  }

  std::string root_;
};

TEST_F(LogStoreTest, AppendsInOrderToTheRankFile) {
  LogStore store(root_);
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 0, "hello\n")), 6);
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 6, "world\n")), 12);
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 3, 0, "rank three\n")), 11);
  EXPECT_EQ(FileContents("j-1/attempt-1/rank-0.log"), "hello\nworld\n");
  EXPECT_EQ(FileContents("j-1/attempt-1/rank-3.log"), "rank three\n");
  EXPECT_EQ(*store.Size("j-1", 1, 0), 12);
  EXPECT_EQ(*store.Size("j-1", 1, 1), 0);
}

TEST_F(LogStoreTest, RepeatedBytesAreAppendedOnce) {
  LogStore store(root_);
  ASSERT_EQ(*store.Append(Chunk("j-1", 1, 0, 0, "abcdef")), 6);
  // An agent retry of the same chunk: nothing new.
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 0, "abcdef")), 6);
  // Overlapping: only "ghi" is new.
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 3, "defghi")), 9);
  // Entirely old.
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 2, "cd")), 9);
  // Empty probe at the end.
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 9, "")), 9);
  EXPECT_EQ(ReadAll(store, "j-1", 1, 0), "abcdefghi");
}

TEST_F(LogStoreTest, GapWritesNothingAndReturnsTheSizeHeld) {
  LogStore store(root_);
  ASSERT_EQ(*store.Append(Chunk("j-1", 2, 1, 0, "0123")), 4);
  EXPECT_EQ(*store.Append(Chunk("j-1", 2, 1, 10, "later")), 4);
  EXPECT_EQ(*store.Append(Chunk("j-1", 2, 5, 7, "first chunk lost")), 0);
  EXPECT_EQ(ReadAll(store, "j-1", 2, 1), "0123");
  // The agent resends from 4.
  EXPECT_EQ(*store.Append(Chunk("j-1", 2, 1, 4, "456789later")), 15);
  EXPECT_EQ(ReadAll(store, "j-1", 2, 1), "0123456789later");
  EXPECT_EQ(*store.Ranks("j-1", 2), (std::vector<int32_t>{1}));  // rank 5 has no file
}

TEST_F(LogStoreTest, ReadsRanges) {
  LogStore store(root_);
  ASSERT_TRUE(store.Append(Chunk("j-1", 1, 0, 0, "line one\nline two\n")).ok());
  absl::StatusOr<v1::LogChunk> c = store.Read("j-1", 1, 0, 5, 3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->job_id(), "j-1");
  EXPECT_EQ(c->attempt(), 1);
  EXPECT_EQ(c->world_rank(), 0);
  EXPECT_EQ(c->offset(), 5);
  EXPECT_EQ(c->data(), "one");
  c = store.Read("j-1", 1, 0, 9, 0);  // default size: the rest
  EXPECT_EQ(c->data(), "line two\n");
  c = store.Read("j-1", 1, 0, 18, 100);  // at the end
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data(), "");
  EXPECT_EQ(c->offset(), 18);
  c = store.Read("j-1", 1, 0, 1000, 100);  // past the end
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data(), "");
  c = store.Read("j-1", 1, 7, 0, 100);  // no such log yet
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data(), "");
  c = store.Read("j-nope", 1, 0, 0, 100);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data(), "");
}

TEST_F(LogStoreTest, ReadIsCappedAtMaxReadBytes) {
  LogStore store(root_);
  const std::string big(LogStore::kMaxReadBytes + 100, 'x');
  ASSERT_TRUE(store.Append(Chunk("j-1", 1, 0, 0, big)).ok());
  absl::StatusOr<v1::LogChunk> c = store.Read("j-1", 1, 0, 0, LogStore::kMaxReadBytes * 4);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(static_cast<int64_t>(c->data().size()), LogStore::kMaxReadBytes);
  c = store.Read("j-1", 1, 0, 0, -1);
  EXPECT_EQ(static_cast<int64_t>(c->data().size()), LogStore::kDefaultReadBytes);
}

TEST_F(LogStoreTest, RanksListsLogsOfOneAttempt) {
  LogStore store(root_);
  EXPECT_TRUE(store.Ranks("j-1", 1)->empty());
  for (int rank : {10, 2, 0}) ASSERT_TRUE(store.Append(Chunk("j-1", 1, rank, 0, "x")).ok());
  ASSERT_TRUE(store.Append(Chunk("j-1", 2, 4, 0, "x")).ok());
  EXPECT_EQ(*store.Ranks("j-1", 1), (std::vector<int32_t>{0, 2, 10}));
  EXPECT_EQ(*store.Ranks("j-1", 2), (std::vector<int32_t>{4}));
  EXPECT_TRUE(store.Ranks("j-1", 3)->empty());
}

TEST_F(LogStoreTest, SizesSurviveARestart) {
  {
    LogStore store(root_);
    ASSERT_EQ(*store.Append(Chunk("j-1", 1, 0, 0, "before\n")), 7);
  }
  LogStore again(root_);
  EXPECT_EQ(*again.Size("j-1", 1, 0), 7);
  EXPECT_EQ(*again.Append(Chunk("j-1", 1, 0, 0, "before\nafter\n")), 13);
  EXPECT_EQ(ReadAll(again, "j-1", 1, 0), "before\nafter\n");
}

TEST_F(LogStoreTest, ValidatesIds) {
  LogStore store(root_);
  const std::vector<std::string> bad_ids = {"",    "..",  ".",     "a/b",
                                            "../etc", "a..b", "j 1", "j\n1",
                                            std::string(129, 'a')};
  for (const std::string& bad : bad_ids) {
    absl::StatusOr<int64_t> s = store.Append(Chunk(bad, 1, 0, 0, "x"));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << "job id " << bad;
    EXPECT_EQ(store.Read(bad, 1, 0, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store.Ranks(bad, 1).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store.DeleteJob(bad).code(), absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<int64_t> s = store.Append(Chunk("j-1", 0, 0, 0, "x"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("attempt"), absl::string_view::npos) << s.status();
  s = store.Append(Chunk("j-1", 1, -1, 0, "x"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("rank"), absl::string_view::npos) << s.status();
  s = store.Append(Chunk("j-1", 1, 0, -5, "x"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("offset"), absl::string_view::npos) << s.status();
  EXPECT_EQ(store.Read("j-1", 1, 0, -1, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(LogStore::ValidateJobId("j-20260101.abc_DEF").ok());
  EXPECT_TRUE(std::filesystem::is_empty(root_));  // nothing was written
}

TEST_F(LogStoreTest, CapKeepsWhatFitsThenOneMarker) {
  LogStore store(root_, LogStoreOptions{16});
  EXPECT_EQ(LogStore::TruncationMarker(int64_t{1} << 30), "[dhp: log truncated at 1 GiB]\n");
  EXPECT_EQ(LogStore::TruncationMarker(16), "[dhp: log truncated at 16 bytes]\n");
  ASSERT_EQ(*store.Append(Chunk("j-1", 1, 0, 0, "0123456789\n")), 11);
  // 5 of these 10 bytes fit.
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 11, "abcdefghij")), 50);
  const std::string expected = "0123456789\nabcde\n[dhp: log truncated at 16 bytes]\n";
  EXPECT_EQ(ReadAll(store, "j-1", 1, 0), expected);
  // Later output is accepted (the agent moves on) and dropped: no second marker.
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 21, "more\n")), 50);
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 1000, "much later\n")), 1011);
  EXPECT_EQ(ReadAll(store, "j-1", 1, 0), expected);
  // Also after a restart.
  LogStore again(root_, LogStoreOptions{16});
  EXPECT_EQ(*again.Append(Chunk("j-1", 1, 0, 2000, "x")), 2001);
  EXPECT_EQ(ReadAll(again, "j-1", 1, 0), expected);
  // Other ranks are not affected.
  EXPECT_EQ(*again.Append(Chunk("j-1", 1, 1, 0, "ok\n")), 3);
}

TEST_F(LogStoreTest, DeleteJobRemovesItsLogsOnly) {
  LogStore store(root_);
  ASSERT_TRUE(store.Append(Chunk("j-1", 1, 0, 0, "a")).ok());
  ASSERT_TRUE(store.Append(Chunk("j-1", 2, 0, 0, "b")).ok());
  ASSERT_TRUE(store.Append(Chunk("j-2", 1, 0, 0, "c")).ok());
  ASSERT_TRUE(store.DeleteJob("j-1").ok());
  EXPECT_TRUE(store.DeleteJob("j-1").ok());  // again: nothing to do
  EXPECT_TRUE(store.Ranks("j-1", 1)->empty());
  EXPECT_EQ(*store.Size("j-1", 1, 0), 0);
  EXPECT_EQ(ReadAll(store, "j-2", 1, 0), "c");
  // The job's logs start over.
  EXPECT_EQ(*store.Append(Chunk("j-1", 1, 0, 0, "new")), 3);
  EXPECT_EQ(ReadAll(store, "j-1", 1, 0), "new");
}

TEST_F(LogStoreTest, ConcurrentAppendsToDifferentRanks) {
  LogStore store(root_);
  constexpr int kLines = 500;
  auto writer = [&](int rank) {
    int64_t offset = 0;
    for (int i = 0; i < kLines; ++i) {
      const std::string line = "rank " + std::to_string(rank) + " line " + std::to_string(i) + "\n";
      absl::StatusOr<int64_t> size = store.Append(Chunk("j-1", 1, rank, offset, line));
      ASSERT_TRUE(size.ok()) << size.status();
      offset += line.size();
      ASSERT_EQ(*size, offset);
      if (i % 50 == 0) {  // a retry, and a reader meanwhile
        ASSERT_EQ(*store.Append(Chunk("j-1", 1, rank, offset - line.size(), line)), offset);
        ASSERT_TRUE(store.Read("j-1", 1, 1 - rank, 0, 100).ok());
      }
    }
  };
  std::thread a(writer, 0);
  std::thread b(writer, 1);
  a.join();
  b.join();
  for (int rank : {0, 1}) {
    std::string expected;
    for (int i = 0; i < kLines; ++i) {
      expected += "rank " + std::to_string(rank) + " line " + std::to_string(i) + "\n";
    }
    EXPECT_EQ(ReadAll(store, "j-1", 1, rank), expected);
  }
  EXPECT_EQ(*store.Ranks("j-1", 1), (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace dhp::controller
