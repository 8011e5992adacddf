// SqliteDb: a small RAII wrapper over one SQLite connection.
//
// Owns the sqlite3 handle and a cache of prepared statements keyed by their SQL text, so that a
// query is compiled once and reused. Every SQLite failure becomes an absl::Status carrying
// SQLite's own message and the statement that failed:
//   SQLITE_BUSY / LOCKED        -> UNAVAILABLE (another process holds the lock; retry)
//   SQLITE_FULL                 -> RESOURCE_EXHAUSTED (disk full)
//   SQLITE_CONSTRAINT_UNIQUE/PK -> ALREADY_EXISTS, other constraints -> FAILED_PRECONDITION
//   SQLITE_CORRUPT / NOTADB     -> DATA_LOSS
//   everything else             -> INTERNAL
//
//   absl::StatusOr<ScopedStatement> stmt = db.Prepare("SELECT proto FROM jobs WHERE id = ?");
//   if (!stmt.ok()) return stmt.status();
//   (*stmt)->BindText(1, id);
//   absl::StatusOr<bool> row = (*stmt)->Step();   // true: a row is ready; false: done
//
// A Statement handed out by Prepare is reset (bindings cleared, read cursor released) when its
// ScopedStatement goes out of scope. Transaction rolls back on destruction unless Commit()ed.
//
// Thread-safety: not thread-safe; one thread at a time per SqliteDb (the connection is opened
// with SQLITE_OPEN_NOMUTEX).
#ifndef DHP_CONTROLLER_SQLITE_DB_H_
#define DHP_CONTROLLER_SQLITE_DB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace dhp::controller {

// One compiled SQL statement. Bind indexes are 1-based, column indexes 0-based (as in SQLite).
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt, std::string sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Bind errors (an index out of range) are remembered and returned by the next Step().
  Statement& BindInt(int index, int64_t value);
  Statement& BindDouble(int index, double value);
  Statement& BindText(int index, absl::string_view value);
  Statement& BindBlob(int index, absl::string_view value);
  Statement& BindNull(int index);

  // Advances: true when a result row is ready, false when the statement has finished.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows (INSERT, UPDATE, DELETE, DDL) to completion.
  absl::Status Run();

  int64_t ColumnInt(int column) const;
  double ColumnDouble(int column) const;
  std::string ColumnText(int column) const;
  std::string ColumnBlob(int column) const;
  bool ColumnIsNull(int column) const;

  // Releases the read cursor and clears bindings; ready to be bound and stepped again.
  void Reset();

  const std::string& sql() const { return sql_; }

 private:
  void NoteBindError(int rc, int index);

  sqlite3* db_;
  sqlite3_stmt* stmt_;
  std::string sql_;
  absl::Status bind_error_;
  bool in_use_ = false;  // handed out by Prepare and not yet given back
  friend class SqliteDb;
  friend class ScopedStatement;
};

// A Statement borrowed from SqliteDb's cache (or owned, when the cached one is already in use).
// Resets the statement on destruction. Move-only.
class ScopedStatement {
 public:
  ScopedStatement(Statement* borrowed, std::unique_ptr<Statement> owned);
  ScopedStatement(ScopedStatement&& other) noexcept;
  ScopedStatement& operator=(ScopedStatement&& other) noexcept;
  ~ScopedStatement();

  Statement* operator->() const { return stmt_; }
  Statement& operator*() const { return *stmt_; }

 private:
  void Release();

  Statement* stmt_;
  std::unique_ptr<Statement> owned_;
};

class SqliteDb;

// BEGIN IMMEDIATE on construction through SqliteDb::Begin(); ROLLBACK on destruction unless
// Commit() succeeded. Holds the connection's write gate (if it has one) until it ends. Move-only.
class Transaction {
 public:
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  ~Transaction();

  absl::Status Commit();

 private:
  friend class SqliteDb;
  Transaction(SqliteDb* db, std::unique_lock<std::mutex> gate)
      : db_(db), gate_(std::move(gate)) {}
  SqliteDb* db_;  // null once committed, rolled back or moved from
  std::unique_lock<std::mutex> gate_;  // released after the COMMIT or ROLLBACK
};

class SqliteDb {
 public:
  // Opens (creating if missing) the database at `path`; ":memory:" gives a private in-memory
  // database. Sets a busy timeout and turns on extended result codes. `read_only`: opens an
  // existing database for reading only (a write fails: FAILED_PRECONDITION).
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path,
                                                        int busy_timeout_ms = 5000,
                                                        bool read_only = false);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs one or more ';'-separated statements, discarding any rows (DDL, PRAGMAs, BEGIN).
  absl::Status Exec(const std::string& sql);

  // A cached prepared statement, reset and with no bindings.
  absl::StatusOr<ScopedStatement> Prepare(const std::string& sql);

  // The first column of the first row of `sql`, as an integer / as text. NOT_FOUND if no rows.
  absl::StatusOr<int64_t> QueryInt(const std::string& sql);
  absl::StatusOr<std::string> QueryText(const std::string& sql);

  // Starts a write transaction (BEGIN IMMEDIATE: takes the write lock now, so a busy database
  // fails here rather than half-way through). With a write gate, waits for it first.
  absl::StatusOr<Transaction> Begin();

  // A mutex that each Transaction of this connection holds from BEGIN to its end, shared with
  // another connection of this process that must hold writers off for a moment (the WAL
  // checkpointer): a writer it holds wakes when the mutex is free, instead of sleeping through
  // SQLite's busy-handler steps (up to 100 ms each). Must outlive this connection.
  void set_write_gate(std::mutex* gate) { gate_ = gate; }

  int64_t last_insert_rowid() const;
  int changes() const;  // rows touched by the last INSERT/UPDATE/DELETE
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

  // A Status for result code `rc`, with SQLite's message for this connection and `context`.
  absl::Status Error(int rc, absl::string_view context) const;

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* db_;
  std::string path_;
  std::mutex* gate_ = nullptr;  // set_write_gate
  // Guards nothing (single-threaded); owns every cached statement, finalized before close.
  std::map<std::string, std::unique_ptr<Statement>, std::less<>> cache_;
};

// Maps an SQLite (extended) result code to a Status with `message`.
absl::Status SqliteStatus(int rc, absl::string_view message);

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_SQLITE_DB_H_
