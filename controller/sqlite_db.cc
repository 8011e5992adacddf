#include "controller/sqlite_db.h"

#include <sqlite3.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dhp::controller {
namespace {

// Statements in error messages are cut to this many characters.
constexpr size_t kMaxSqlInMessage = 120;

std::string Abbreviate(absl::string_view sql) {
  std::string out;
  out.reserve(std::min(sql.size(), kMaxSqlInMessage) + 3);
  bool space = false;
  for (char c : sql) {  // collapse the newlines and indentation of multi-line statements
    if (c == ' ' || c == '\n' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
    if (out.size() >= kMaxSqlInMessage) return out + "...";
  }
  return out;
}

}  // namespace

absl::Status SqliteStatus(int rc, absl::string_view message) {
  switch (rc & 0xff) {
    case SQLITE_OK:
      return absl::OkStatus();
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return absl::AlreadyExistsError(message);
      }
      return absl::FailedPreconditionError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

// ---- Statement ------------------------------------------------------------------------------

Statement::Statement(sqlite3* db, sqlite3_stmt* stmt, std::string sql)
    : db_(db), stmt_(stmt), sql_(std::move(sql)) {}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::NoteBindError(int rc, int index) {
  if (rc == SQLITE_OK || !bind_error_.ok()) return;
  bind_error_ = SqliteStatus(rc, absl::StrCat("SQLite cannot bind parameter ", index, " of \"",
                                              Abbreviate(sql_), "\": ", sqlite3_errstr(rc)));
}

Statement& Statement::BindInt(int index, int64_t value) {
  NoteBindError(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}

Statement& Statement::BindDouble(int index, double value) {
  NoteBindError(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}

Statement& Statement::BindText(int index, absl::string_view value) {
  NoteBindError(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT,
                                    SQLITE_UTF8),
                index);
  return *this;
}

Statement& Statement::BindBlob(int index, absl::string_view value) {
  // A zero-length blob must still be a blob, not NULL: pass a non-null pointer.
  static const char kEmpty = 0;
  NoteBindError(sqlite3_bind_blob64(stmt_, index, value.empty() ? &kEmpty : value.data(),
                                    value.size(), SQLITE_TRANSIENT),
                index);
  return *this;
}

Statement& Statement::BindNull(int index) {
  NoteBindError(sqlite3_bind_null(stmt_, index), index);
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  if (!bind_error_.ok()) return bind_error_;
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteStatus(sqlite3_extended_errcode(db_),
                      absl::StrCat("SQLite error in \"", Abbreviate(sql_),
                                   "\": ", sqlite3_errmsg(db_)));
}

absl::Status Statement::Run() {
  absl::StatusOr<bool> row = Step();
  if (!row.ok()) return row.status();
  if (*row) {
    return absl::InternalError(
        absl::StrCat("statement \"", Abbreviate(sql_), "\" returned rows; use Step()"));
  }
  return absl::OkStatus();
}

int64_t Statement::ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::ColumnDouble(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::ColumnText(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, column));
}

std::string Statement::ColumnBlob(int column) const {
  const void* blob = sqlite3_column_blob(stmt_, column);
  if (blob == nullptr) return std::string();
  return std::string(static_cast<const char*>(blob), sqlite3_column_bytes(stmt_, column));
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = absl::OkStatus();
}

// ---- ScopedStatement ------------------------------------------------------------------------

ScopedStatement::ScopedStatement(Statement* borrowed, std::unique_ptr<Statement> owned)
    : stmt_(owned ? owned.get() : borrowed), owned_(std::move(owned)) {
  stmt_->in_use_ = true;
}

ScopedStatement::ScopedStatement(ScopedStatement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)), owned_(std::move(other.owned_)) {}

ScopedStatement& ScopedStatement::operator=(ScopedStatement&& other) noexcept {
  if (this != &other) {
    Release();
    stmt_ = std::exchange(other.stmt_, nullptr);
    owned_ = std::move(other.owned_);
  }
  return *this;
}

ScopedStatement::~ScopedStatement() { Release(); }

void ScopedStatement::Release() {
  if (stmt_ == nullptr) return;
  stmt_->Reset();
  stmt_->in_use_ = false;
  stmt_ = nullptr;
  owned_.reset();
}

// ---- Transaction ----------------------------------------------------------------------------

Transaction::Transaction(Transaction&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), gate_(std::move(other.gate_)) {}

Transaction::~Transaction() {
  if (db_ == nullptr) return;
  // SQLite may already have rolled back by itself (e.g. after SQLITE_FULL); then there is
  // nothing left to undo.
  if (sqlite3_get_autocommit(db_->handle()) == 0) {
    sqlite3_exec(db_->handle(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

absl::Status Transaction::Commit() {
  if (db_ == nullptr) {
    return absl::FailedPreconditionError("transaction was already committed or rolled back");
  }
  absl::Status status = db_->Exec("COMMIT");
  if (status.ok()) {  // on failure the destructor rolls back
    db_ = nullptr;
    if (gate_.owns_lock()) gate_.unlock();
  }
  return status;
}

// ---- SqliteDb -------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path,
                                                         int busy_timeout_ms, bool read_only) {
  sqlite3* db = nullptr;
  const int mode = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  const int rc = sqlite3_open_v2(path.c_str(), &db, mode | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return SqliteStatus(rc, absl::StrCat("cannot open SQLite database \"", path, "\": ", message,
                                         "; check that the directory exists and is writable"));
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  return std::unique_ptr<SqliteDb>(new SqliteDb(db, path));
}

SqliteDb::~SqliteDb() {
  cache_.clear();  // statements must be finalized before the connection closes
  sqlite3_close(db_);
}

absl::Status SqliteDb::Error(int rc, absl::string_view context) const {
  return SqliteStatus(rc, absl::StrCat("SQLite error in \"", Abbreviate(context),
                                       "\" on ", path_, ": ", sqlite3_errmsg(db_)));
}

absl::Status SqliteDb::Exec(const std::string& sql) {
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(sqlite3_extended_errcode(db_), sql);
  return absl::OkStatus();
}

absl::StatusOr<ScopedStatement> SqliteDb::Prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end() && !it->second->in_use_) {
    return ScopedStatement(it->second.get(), nullptr);
  }
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  if (rc != SQLITE_OK) return Error(sqlite3_extended_errcode(db_), sql);
  if (raw == nullptr) return absl::InvalidArgumentError("empty SQL statement");
  auto stmt = std::make_unique<Statement>(db_, raw, sql);
  if (it != cache_.end()) {
    // The cached one is being stepped by an enclosing caller: hand out a private copy.
    return ScopedStatement(nullptr, std::move(stmt));
  }
  Statement* borrowed = stmt.get();
  cache_.emplace(sql, std::move(stmt));
  return ScopedStatement(borrowed, nullptr);
}

absl::StatusOr<int64_t> SqliteDb::QueryInt(const std::string& sql) {
  absl::StatusOr<ScopedStatement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = (*stmt)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("no rows from \"", Abbreviate(sql), "\""));
  return (*stmt)->ColumnInt(0);
}

absl::StatusOr<std::string> SqliteDb::QueryText(const std::string& sql) {
  absl::StatusOr<ScopedStatement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = (*stmt)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("no rows from \"", Abbreviate(sql), "\""));
  return (*stmt)->ColumnText(0);
}

absl::StatusOr<Transaction> SqliteDb::Begin() {
  if (sqlite3_get_autocommit(db_) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("a transaction is already open on ", path_, "; transactions do not nest"));
  }
  std::unique_lock<std::mutex> gate;
  if (gate_ != nullptr) gate = std::unique_lock<std::mutex>(*gate_);
  absl::Status status = Exec("BEGIN IMMEDIATE");
  if (!status.ok()) return status;
  return Transaction(this, std::move(gate));
}

int64_t SqliteDb::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

int SqliteDb::changes() const { return sqlite3_changes(db_); }

}  // namespace dhp::controller
