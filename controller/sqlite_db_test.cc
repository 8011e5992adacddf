#include "controller/sqlite_db.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::testing::HasSubstr;

TEST(SqliteDbTest, TransactionRollsBackUnlessCommitted) {
  auto db = SqliteDb::Open(":memory:");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Exec("CREATE TABLE t (x INTEGER PRIMARY KEY)").ok());
  {
    auto tx = (*db)->Begin();
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE((*db)->Exec("INSERT INTO t VALUES (1)").ok());
    EXPECT_EQ((*db)->Begin().status().code(), absl::StatusCode::kFailedPrecondition);
  }  // dropped: rolled back
  EXPECT_EQ(*(*db)->QueryInt("SELECT COUNT(*) FROM t"), 0);
  {
    auto tx = (*db)->Begin();
    ASSERT_TRUE(tx.ok());
    auto insert = (*db)->Prepare("INSERT INTO t VALUES (?)");
    ASSERT_TRUE(insert.ok());
    (*insert)->BindInt(1, 7);
    ASSERT_TRUE((*insert)->Run().ok());
    ASSERT_TRUE(tx->Commit().ok());
  }
  EXPECT_EQ(*(*db)->QueryInt("SELECT x FROM t"), 7);

  // Constraint and syntax errors carry SQLite's message.
  absl::Status dup = (*db)->Exec("INSERT INTO t VALUES (7)");
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(dup.message()), HasSubstr("UNIQUE constraint failed"));
  absl::StatusOr<ScopedStatement> bad = (*db)->Prepare("SELEC 1");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("syntax error"));
  EXPECT_EQ((*db)->QueryInt("SELECT x FROM t WHERE x = 99").status().code(),
            absl::StatusCode::kNotFound);
}

// Whether another thread finds `gate` locked (try_lock on the owning thread would be undefined).
bool HeldElsewhere(std::mutex& gate) {
  bool free = false;
  std::thread([&] {
    free = gate.try_lock();
    if (free) gate.unlock();
  }).join();
  return !free;
}

TEST(SqliteDbTest, ATransactionHoldsTheWriteGateUntilItEnds) {
  auto db = SqliteDb::Open(":memory:");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Exec("CREATE TABLE t (x INTEGER PRIMARY KEY)").ok());
  std::mutex gate;
  (*db)->set_write_gate(&gate);
  {
    auto tx = (*db)->Begin();
    ASSERT_TRUE(tx.ok());
    EXPECT_TRUE(HeldElsewhere(gate));
    Transaction moved(std::move(*tx));
    EXPECT_TRUE(HeldElsewhere(gate));
    ASSERT_TRUE((*db)->Exec("INSERT INTO t VALUES (1)").ok());
    ASSERT_TRUE(moved.Commit().ok());
    EXPECT_FALSE(HeldElsewhere(gate));
  }
  {
    auto tx = (*db)->Begin();
    ASSERT_TRUE(tx.ok());
    EXPECT_TRUE(HeldElsewhere(gate));
  }  // dropped: rolled back, and the gate is free again
  EXPECT_FALSE(HeldElsewhere(gate));

  // A writer waits at a gate someone else holds, and goes on once it is free.
  std::atomic<bool> begun{false};
  gate.lock();
  std::thread writer([&] {
    auto tx = (*db)->Begin();
    begun = tx.ok();
    if (tx.ok()) EXPECT_TRUE(tx->Commit().ok());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(begun.load());
  gate.unlock();
  writer.join();
  EXPECT_TRUE(begun.load());
  EXPECT_EQ(*(*db)->QueryInt("SELECT COUNT(*) FROM t"), 1);
}

TEST(SqliteDbTest, NestedUseOfACachedStatementGetsItsOwnCopy) {
  auto db = SqliteDb::Open(":memory:");
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE((*db)->Exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2);").ok());
  const std::string sql = "SELECT x FROM t ORDER BY x";
  auto outer = (*db)->Prepare(sql);
  ASSERT_TRUE(outer.ok());
  ASSERT_TRUE(*(*outer)->Step());
  EXPECT_EQ((*outer)->ColumnInt(0), 1);
  {
    auto inner = (*db)->Prepare(sql);
    ASSERT_TRUE(inner.ok());
    ASSERT_TRUE(*(*inner)->Step());
    EXPECT_EQ((*inner)->ColumnInt(0), 1);
  }
  ASSERT_TRUE(*(*outer)->Step());  // the outer cursor was not disturbed
  EXPECT_EQ((*outer)->ColumnInt(0), 2);
  EXPECT_FALSE(*(*outer)->Step());
}

}  // namespace
}  // namespace dhp::controller
