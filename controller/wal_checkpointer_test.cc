#include "controller/wal_checkpointer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

WalCheckpointerOptions Every(std::chrono::milliseconds period) {
  WalCheckpointerOptions options;
  options.period = period;
  return options;
}

// Restarts only (never a truncation), checked every 5 ms.
WalCheckpointerOptions RestartsOnly(int64_t restart_above_bytes,
                                    std::chrono::milliseconds min_restart_interval) {
  WalCheckpointerOptions options = Every(std::chrono::milliseconds(5));
  options.restart_above_bytes = restart_above_bytes;
  options.min_restart_interval = min_restart_interval;
  options.truncate_above_bytes = int64_t{1} << 40;
  return options;
}

TEST(WalCheckpointerTest, CheckpointsWhatTheWriterLeavesInTheWal) {
  const std::string path = testing::TempDir() + "/wal_ckpt.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));
  // Nothing has been copied back to the database file yet.
  const auto before = std::filesystem::file_size(path);
  auto ckpt = WalCheckpointer::Start(path, nullptr, Every(std::chrono::milliseconds(20)));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  WaitUntil([&] { return (*ckpt)->checkpoints() >= 2; });
  EXPECT_GE((*ckpt)->checkpoints(), 2);
  // The pages reached the main file: it grew by at least the 400 KB written.
  EXPECT_GE(std::filesystem::file_size(path), before + 50 * 8192);
}

// Once writes pause, a WAL file past truncate_above_bytes is emptied; one under it is kept (its
// trimming would cost more than the space it holds).
TEST(WalCheckpointerTest, AnIdleWalPastTheSizeLimitIsTruncated) {
  const std::string path = testing::TempDir() + "/wal_truncate.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));  // ~400 KiB of WAL
  {
    WalCheckpointerOptions under = Every(std::chrono::milliseconds(10));
    under.truncate_above_bytes = int64_t{1} << 20;
    auto ckpt = WalCheckpointer::Start(path, nullptr, under);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    WaitUntil([&] { return (*ckpt)->checkpoints() >= 3; });
    ASSERT_GE((*ckpt)->checkpoints(), 3);
    EXPECT_EQ((*ckpt)->truncations(), 0);
    EXPECT_GE(std::filesystem::file_size(path + "-wal"), 50u * 8192);
  }
  WalCheckpointerOptions over = Every(std::chrono::milliseconds(10));
  over.truncate_above_bytes = 200 * 1024;
  auto ckpt = WalCheckpointer::Start(path, nullptr, over);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  WaitUntil([&] { return (*ckpt)->truncations() >= 1; });
  ASSERT_GE((*ckpt)->truncations(), 1);
  EXPECT_EQ(std::filesystem::file_size(path + "-wal"), 0u);
  EXPECT_EQ(*writer->QueryInt("SELECT COUNT(*) FROM t"), 50);
}

// Writes that slow to a trickle (one small row every 2 ms, so no pass ever finds the WAL
// unchanged) do not keep a big WAL file from being truncated.
TEST(WalCheckpointerTest, AWalPastTheSizeLimitIsTruncatedUnderATrickleOfWrites) {
  const std::string path = testing::TempDir() + "/wal_trickle.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));  // ~400 KiB of WAL
  std::mutex gate;
  writer->set_write_gate(&gate);
  WalCheckpointerOptions options = Every(std::chrono::milliseconds(10));
  options.truncate_above_bytes = 200 * 1024;
  auto ckpt = WalCheckpointer::Start(path, &gate, options);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::atomic<int> truncate_holds{0};
  (*ckpt)->set_hold_observer([&](const char* kind, double) {
    if (std::string(kind) == "truncate") ++truncate_holds;
  });
  int rows = 0;
  for (; rows < 1000 && (*ckpt)->truncations() == 0; ++rows) {
    absl::StatusOr<Transaction> txn = writer->Begin();
    ASSERT_TRUE(txn.ok()) << txn.status();
    ASSERT_TRUE(writer->Exec("INSERT INTO t VALUES (x'01')").ok());
    ASSERT_TRUE(txn->Commit().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GE((*ckpt)->truncations(), 1);
  EXPECT_GE(truncate_holds.load(), 1);
  EXPECT_LT(std::filesystem::file_size(path + "-wal"), 200u * 1024);
  EXPECT_EQ(*writer->QueryInt("SELECT COUNT(*) FROM t"), 50 + rows);
}

// A reader of an older snapshot keeps the WAL from being emptied; the TRUNCATE then gives up
// after a short wait (the writers are held meanwhile) instead of SQLite's usual 5 s, and the
// next quiet pass after the reader is done truncates.
TEST(WalCheckpointerTest, AReaderDelaysTheTruncationButHoldsTheWritersOnlyBriefly) {
  const std::string path = testing::TempDir() + "/wal_reader.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));  // ~400 KiB of WAL
  auto reader = SqliteDb::Open(path);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE((*reader)->Exec("BEGIN").ok());
  ASSERT_EQ(*(*reader)->QueryInt("SELECT COUNT(*) FROM t"), 50);  // its snapshot is now fixed
  WalCheckpointerOptions options = Every(std::chrono::milliseconds(10));
  options.truncate_above_bytes = 200 * 1024;
  auto ckpt = WalCheckpointer::Start(path, nullptr, options);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::mutex mu;
  std::vector<double> holds;
  (*ckpt)->set_hold_observer([&](const char*, double seconds) {
    std::lock_guard<std::mutex> lock(mu);
    holds.push_back(seconds);
  });
  WaitUntil([&] {
    std::lock_guard<std::mutex> lock(mu);
    return holds.size() >= 2;
  });
  EXPECT_EQ((*ckpt)->truncations(), 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_GE(holds.size(), 2u);
    for (double s : holds) EXPECT_LT(s, 1.0);
  }
  ASSERT_TRUE((*reader)->Exec("COMMIT").ok());
  WaitUntil([&] { return (*ckpt)->truncations() >= 1; });
  EXPECT_GE((*ckpt)->truncations(), 1);
  EXPECT_EQ(std::filesystem::file_size(path + "-wal"), 0u);
}

// A writer that never pauses (so no pass ever finds the WAL fully copied by itself) writes 16
// MiB; the checkpointer copies the last frames with the writer held at the gate, the writer
// starts the WAL over, and the file stays near restart_above_bytes instead of growing to 16 MiB.
TEST(WalCheckpointerTest, UnderSteadyWritesTheWalStartsOverInsteadOfGrowing) {
  const std::string path = testing::TempDir() + "/wal_restart.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));
  std::mutex gate;
  writer->set_write_gate(&gate);
  const WalCheckpointerOptions options =
      RestartsOnly(512 * 1024, std::chrono::milliseconds(0));
  auto ckpt = WalCheckpointer::Start(path, &gate, options);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::mutex mu;
  std::map<std::string, int> holds;  // by kind
  double longest = 0;
  (*ckpt)->set_hold_observer([&](const char* kind, double seconds) {
    std::lock_guard<std::mutex> lock(mu);
    ++holds[kind];
    longest = std::max(longest, seconds);
  });
  uintmax_t largest = 0;
  constexpr int kRows = 2048;  // 8 KiB each: 16 MiB
  for (int i = 0; i < kRows; ++i) {
    absl::StatusOr<Transaction> txn = writer->Begin();
    ASSERT_TRUE(txn.ok()) << txn.status();
    ASSERT_TRUE(writer->Exec("INSERT INTO t VALUES (zeroblob(8192))").ok());
    ASSERT_TRUE(txn->Commit().ok());
    largest = std::max(largest, std::filesystem::file_size(path + "-wal"));
  }
  EXPECT_GE((*ckpt)->restarts(), 1);
  EXPECT_LT(largest, 8u << 20) << "the WAL file grew with the writes";
  (*ckpt)->set_hold_observer(nullptr);  // returns once no call is running
  EXPECT_GE(holds["restart"], (*ckpt)->restarts());  // every hold is reported, failed ones too
  EXPECT_EQ(holds.count("truncate"), 0u);
  EXPECT_GT(longest, 0.0);
  EXPECT_LT(longest, 5.0);
  EXPECT_EQ(*writer->QueryInt("SELECT COUNT(*) FROM t"), 50 + kRows);
}

// A restart holds the writers; under a flood of writes it comes at most once per
// min_restart_interval, however far past restart_above_bytes the WAL is.
TEST(WalCheckpointerTest, WritersAreHeldForARestartAtMostOncePerInterval) {
  const std::string path = testing::TempDir() + "/wal_restart_interval.db";
  std::unique_ptr<SqliteDb> writer;
  ASSERT_NO_FATAL_FAILURE(FillWal(path, &writer));
  std::mutex gate;
  writer->set_write_gate(&gate);
  const WalCheckpointerOptions options =
      RestartsOnly(256 * 1024, std::chrono::milliseconds(400));
  auto ckpt = WalCheckpointer::Start(path, &gate, options);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::mutex mu;
  std::vector<std::chrono::steady_clock::time_point> holds;
  const auto observed_from = std::chrono::steady_clock::now();
  (*ckpt)->set_hold_observer([&](const char* kind, double seconds) {
    std::lock_guard<std::mutex> lock(mu);
    holds.push_back(std::chrono::steady_clock::now() -
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(seconds)));  // when the hold began
  });
  const auto start = std::chrono::steady_clock::now();
  uintmax_t largest = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1500)) {
    absl::StatusOr<Transaction> txn = writer->Begin();
    ASSERT_TRUE(txn.ok()) << txn.status();
    ASSERT_TRUE(writer->Exec("INSERT INTO t VALUES (zeroblob(8192))").ok());
    ASSERT_TRUE(txn->Commit().ok());
    largest = std::max(largest, std::filesystem::file_size(path + "-wal"));
  }
  (*ckpt)->set_hold_observer(nullptr);
  using std::chrono::milliseconds;
  const milliseconds observed =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - observed_from);
  // The writes went on the whole time: without the interval they would be held every few
  // periods (5 ms), as in UnderSteadyWritesTheWalStartsOverInsteadOfGrowing.
  EXPECT_GT(largest, 4 * options.restart_above_bytes);
  ASSERT_GE(holds.size(), 1u);
  // A hold that began just before the observer was set is counted too: hence 2 +.
  EXPECT_LE(static_cast<int64_t>(holds.size()), 2 + observed.count() / 400);
  for (size_t i = 1; i < holds.size(); ++i) {
    // Where a hold began is estimated after it (the observer's clock less its length): a
    // preempted observer makes one look later, so the spacing is checked with 50 ms to spare.
    const milliseconds apart = std::chrono::duration_cast<milliseconds>(holds[i] - holds[i - 1]);
    EXPECT_GE(apart.count(), 350) << "hold " << i;
  }
}

}  // namespace
}  // namespace dhp::controller
