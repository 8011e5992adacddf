#include "controller/wal_checkpointer.h"

#include <filesystem>
#include <thread>

#include "controller/sqlite_db.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

// A fresh WAL-mode database at `path` with 50 rows of 8 KiB left in its WAL (no checkpoint).
void FillWal(const std::string& path, std::unique_ptr<SqliteDb>* writer) {
  std::filesystem::remove(path);
  auto db = SqliteDb::Open(path);
  ASSERT_TRUE(db.ok());
  *writer = std::move(*db);
  ASSERT_EQ(*(*writer)->QueryText("PRAGMA journal_mode = WAL"), "wal");
  ASSERT_TRUE((*writer)->Exec("PRAGMA wal_autocheckpoint = 0; CREATE TABLE t (x BLOB)").ok());
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE((*writer)->Exec("INSERT INTO t VALUES (zeroblob(8192))").ok());
  }
}

// Polls `done` every 10 ms, at most 2 s; whether it became true.
template <typename F>
bool WaitUntil(F done) {
  for (int i = 0; i < 200 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(WalCheckpointerTest, CheckpointsWhatTheWriterLeavesInTheWal) {
  const std::string path = testing::TempDir() + "/wal_ckpt.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));
  // Nothing has been copied back to the database file yet.
  const auto before = std::filesystem::file_size(path);
  auto ckpt = WalCheckpointer::Start(path, std::chrono::milliseconds(20));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  WaitUntil([&] { return (*ckpt)->checkpoints() >= 2; });
  EXPECT_GE((*ckpt)->checkpoints(), 2);
  // The pages reached the main file: it grew by at least the 400 KB written.
  EXPECT_GE(std::filesystem::file_size(path), before + 50 * 8192);
}

TEST(WalCheckpointerTest, TruncateEmptiesTheWalFile) {
  const std::string path = testing::TempDir() + "/wal_truncate.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));
  ASSERT_GE(std::filesystem::file_size(path + "-wal"), 50u * 8192);
  // PASSIVE alone (truncation an hour away) copies the pages but keeps the file's size.
  {
    auto passive = WalCheckpointer::Start(path, std::chrono::milliseconds(10), std::chrono::hours(1));
    ASSERT_TRUE(passive.ok()) << passive.status();
    WaitUntil([&] { return (*passive)->checkpoints() >= 2; });
    ASSERT_GE((*passive)->checkpoints(), 2);
    EXPECT_EQ((*passive)->truncations(), 0);
    EXPECT_GE(std::filesystem::file_size(path + "-wal"), 50u * 8192);
  }
  auto ckpt = WalCheckpointer::Start(path, std::chrono::milliseconds(10),
                                     std::chrono::milliseconds(30));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  WaitUntil([&] { return (*ckpt)->truncations() >= 1; });
  ASSERT_GE((*ckpt)->truncations(), 1);
  EXPECT_EQ(std::filesystem::file_size(path + "-wal"), 0u);
  EXPECT_EQ(*writer->QueryInt("SELECT COUNT(*) FROM t"), 50);
}

// A WAL file past truncate_above_bytes is emptied at the next pass, long before the scheduled
// truncation (an hour away here): a burst of writes never leaves a file whose trimming would
// hold the writers for long.
TEST(WalCheckpointerTest, AWalPastTheSizeLimitIsTruncatedBeforeItsTime) {
  const std::string path = testing::TempDir() + "/wal_size.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));  // ~400 KiB of WAL
  {  // under the limit: copied, not truncated
    auto under = WalCheckpointer::Start(path, std::chrono::milliseconds(10), std::chrono::hours(1),
                                        int64_t{1} << 20);
    ASSERT_TRUE(under.ok()) << under.status();
    WaitUntil([&] { return (*under)->checkpoints() >= 3; });
    ASSERT_GE((*under)->checkpoints(), 3);
    EXPECT_EQ((*under)->truncations(), 0);
    EXPECT_GE(std::filesystem::file_size(path + "-wal"), 50u * 8192);
  }
  auto over = WalCheckpointer::Start(path, std::chrono::milliseconds(10), std::chrono::hours(1),
                                     200 * 1024);
  ASSERT_TRUE(over.ok()) << over.status();
  WaitUntil([&] { return (*over)->truncations() >= 1; });
  ASSERT_GE((*over)->truncations(), 1);
  EXPECT_EQ(std::filesystem::file_size(path + "-wal"), 0u);
  EXPECT_EQ(*writer->QueryInt("SELECT COUNT(*) FROM t"), 50);
}

}  // namespace
}  // namespace dhp::controller
