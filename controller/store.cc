#include "controller/store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/proto_utf8.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "controller/sqlite_db.h"
#include "controller/store_internal.h"
#include "controller/wal_checkpointer.h"
#include "google/protobuf/util/time_util.h"

namespace dhp::controller {

using store_internal::AppendEvents;
using store_internal::CheckStorable;
using store_internal::DieIfError;
using store_internal::JobExists;
using store_internal::Micros;
using store_internal::OrDie;
using store_internal::ReadAll;
using store_internal::ReadRows;
using store_internal::RowsRead;
using store_internal::UnreadableRow;

namespace {

// The schema, oldest first. Append a migration to change it; never edit a released one.
struct Migration {
  int version;
  const char* description;
  const char* sql;
};

const Migration kMigrations[] = {
    {1, "initial schema: jobs, labels, runs, nodes, checkpoints, events", R"sql(
      CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- insertion order: pagination key
        id TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        state INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        create_us INTEGER NOT NULL,
        update_us INTEGER NOT NULL,
        proto BLOB NOT NULL                     -- dhp.v1.Job
      );
      CREATE INDEX jobs_by_state ON jobs(state, seq);
      CREATE TABLE job_labels (
        job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (job_id, key)
      ) WITHOUT ROWID;
      CREATE INDEX job_labels_by_key ON job_labels(key, value);
      CREATE TABLE runs (
        job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        attempt INTEGER NOT NULL,
        state INTEGER NOT NULL,
        proto BLOB NOT NULL,                    -- dhp.v1.Run
        PRIMARY KEY (job_id, attempt)
      );
      CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        hostname TEXT NOT NULL,
        state INTEGER NOT NULL,
        last_heartbeat_us INTEGER NOT NULL,
        proto BLOB NOT NULL                     -- dhp.v1.Node
      );
      CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        attempt INTEGER NOT NULL,
        step INTEGER NOT NULL,
        path TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        create_us INTEGER NOT NULL,
        proto BLOB NOT NULL                     -- dhp.v1.Checkpoint, id taken from the column
      );
      CREATE INDEX checkpoints_by_job ON checkpoints(job_id, step);
      CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,   -- never reused: Watch resumes after an id
        job_id TEXT NOT NULL,                   -- '' for node events
        attempt INTEGER NOT NULL,
        node_id TEXT NOT NULL,
        time_us INTEGER NOT NULL,
        type TEXT NOT NULL,
        from_state TEXT NOT NULL,
        to_state TEXT NOT NULL,
        reason TEXT NOT NULL,
        proto BLOB NOT NULL                     -- dhp.v1.Event, id taken from the column
      );
      CREATE INDEX events_by_job ON events(job_id, id);
    )sql"},
    {2, "quarantine: rows whose stored message could not be read", R"sql(
      CREATE TABLE quarantine (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        source TEXT NOT NULL,                   -- the table it was in: jobs, runs, nodes, ...
        row_key TEXT NOT NULL,                  -- its key there; ill-formed UTF-8 as \xNN
        reason TEXT NOT NULL,
        time_us INTEGER NOT NULL,
        proto BLOB NOT NULL                     -- the stored message, byte for byte
      );
      CREATE INDEX quarantine_by_row ON quarantine(source, row_key);
    )sql"},
    {3, "jobs.owner: who submitted a job (set once, at submission)", R"sql(
      ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
      CREATE INDEX jobs_by_owner ON jobs(owner, seq);
    )sql"},
    {4, "rendezvous KV: keys of run attempts that bootstrap, and replies to retried calls", R"sql(
      CREATE TABLE rendezvous_keys (
        job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        attempt INTEGER NOT NULL,
        key TEXT NOT NULL,
        value BLOB NOT NULL,
        PRIMARY KEY (job_id, attempt, key)
      );
      CREATE TABLE rendezvous_replies (
        job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        attempt INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        reply INTEGER NOT NULL,                 -- KvAdd: the sum; KvDelete: 1 if the key existed
        PRIMARY KEY (job_id, attempt, request_id)
      );
    )sql"},
    {5, "exports: checkpoints exported as Hugging Face model directories", R"sql(
      CREATE TABLE exports (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- creation order
        id TEXT NOT NULL UNIQUE,
        job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        state INTEGER NOT NULL,
        proto BLOB NOT NULL                     -- dhp.v1.Export
      );
      CREATE INDEX exports_by_job ON exports(job_id, seq);
      CREATE INDEX exports_by_state ON exports(state);
    )sql"},
};

}  // namespace

namespace store_internal {

absl::StatusOr<bool> JobExists(SqliteDb& db, const std::string& job_id) {
  DHP_ASSIGN_OR_RETURN(ScopedStatement select, db.Prepare("SELECT 1 FROM jobs WHERE id = ?"));
  select->BindText(1, job_id);
  return select->Step();
}

int64_t Micros(const google::protobuf::Timestamp& t) {
  return google::protobuf::util::TimeUtil::TimestampToMicroseconds(t);
}

// For the read methods whose signatures carry no Status: a failing SQLite call on our own
// database is a broken invariant (I/O error, a corrupt page), and guessing an empty answer would
// mislead the supervisor, so the controller stops loudly. A row whose message does not parse is
// not such a failure: it is quarantined (store_quarantine.cc).
void DieIfError(const absl::Status& status, const char* what) {
  DHP_CHECK(status.ok()) << "dhp store: " << what << " failed: " << status;
}

// INVALID_ARGUMENT naming the field when `msg` holds a string that is not UTF-8: protobuf would
// write it, and then refuse to parse the row again.
absl::Status CheckStorable(const google::protobuf::Message& msg, const std::string& what,
                           const google::protobuf::FieldDescriptor* skip) {
  const std::string bad = InvalidUtf8Field(msg, skip);
  if (bad.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "refusing to store ", EscapeInvalidUtf8(what), ": ", bad,
      "; string fields must be UTF-8, or the stored row could not be read back"));
}


absl::StatusOr<std::vector<v1::Event>> AppendEvents(SqliteDb& db,
                                                    const std::vector<v1::Event>& events,
                                                    const std::string& default_job_id,
                                                    const std::string& default_node_id) {
  std::vector<v1::Event> out;
  out.reserve(events.size());
  for (const v1::Event& in : events) {
    v1::Event event = in;
    event.set_id(0);
    if (event.job_id().empty()) event.set_job_id(default_job_id);
    if (event.node_id().empty()) event.set_node_id(default_node_id);
    DHP_RETURN_IF_ERROR(CheckStorable(event, absl::StrCat("a ", event.type(), " event")));
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement insert,
        db.Prepare("INSERT INTO events (job_id, attempt, node_id, time_us, type, from_state, "
                   "to_state, reason, proto) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    insert->BindText(1, event.job_id())
        .BindInt(2, event.attempt())
        .BindText(3, event.node_id())
        .BindInt(4, Micros(event.time()))
        .BindText(5, event.type())
        .BindText(6, event.from_state())
        .BindText(7, event.to_state())
        .BindText(8, event.reason())
        .BindBlob(9, event.SerializeAsString());
    DHP_RETURN_IF_ERROR(insert->Run());
    event.set_id(db.last_insert_rowid());
    out.push_back(std::move(event));
  }
  return out;
}

}  // namespace store_internal

// ---- opening and migrating ------------------------------------------------------------------

Store::Store(std::unique_ptr<SqliteDb> db) : db_(std::move(db)) {}
Store::~Store() {
  checkpointer_.reset();  // stop checkpointing before the main connection closes
}

std::map<std::string, int64_t> Store::FileBytes() const {
  std::map<std::string, int64_t> sizes;
  if (checkpointer_ == nullptr) return sizes;  // in memory, or a reader (the writer reports)
  for (const auto& [name, suffix] : {std::pair{"db", ""}, std::pair{"wal", "-wal"}}) {
    struct stat st;
    const std::string file = db_->path() + suffix;
    if (::stat(file.c_str(), &st) == 0) sizes[name] = static_cast<int64_t>(st.st_size);
  }
  return sizes;
}

void Store::set_wal_hold_observer(std::function<void(const char* kind, double seconds)> observer) {
  if (checkpointer_ != nullptr) checkpointer_->set_hold_observer(std::move(observer));
}

int Store::LatestSchemaVersion() { return std::end(kMigrations)[-1].version; }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  DHP_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  // Foreign keys are per connection and off by default; PRAGMA foreign_keys is a no-op inside a
  // transaction, so set it before anything else.
  DHP_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys = ON"));
  DHP_ASSIGN_OR_RETURN(std::string mode, db->QueryText("PRAGMA journal_mode = WAL"));
  if (mode != "wal" && mode != "memory") {  // an in-memory database has no journal file
    return absl::FailedPreconditionError(
        absl::StrCat("cannot enable WAL mode on ", path, ": journal_mode stays \"", mode,
                     "\"; put the database on a local file system"));
  }
  // In WAL mode NORMAL loses at most the last transactions on power loss, never consistency.
  DHP_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous = NORMAL"));
  std::unique_ptr<Store> store(new Store(std::move(db)));
  DHP_RETURN_IF_ERROR(store->Migrate());
  if (mode == "wal") {
    // Checkpoint from a background thread instead of inside whichever commit crosses the
    // threshold, and trim the WAL file there too, not in one of this connection's commits (see
    // wal_checkpointer.h).
    DHP_RETURN_IF_ERROR(store->db_->Exec("PRAGMA wal_autocheckpoint = 0"));
    DHP_RETURN_IF_ERROR(store->db_->Exec("PRAGMA journal_size_limit = -1"));
    store->db_->set_write_gate(&store->write_gate_);
    DHP_ASSIGN_OR_RETURN(store->checkpointer_,
                         WalCheckpointer::Start(path, &store->write_gate_));
  }
  return store;
}

absl::StatusOr<std::unique_ptr<Store>> Store::OpenReader(const std::string& path) {
  DHP_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db,
                       SqliteDb::Open(path, /*busy_timeout_ms=*/5000, /*read_only=*/true));
  DHP_ASSIGN_OR_RETURN(std::string mode, db->QueryText("PRAGMA journal_mode"));
  DHP_ASSIGN_OR_RETURN(int64_t version, db->QueryInt("PRAGMA user_version"));
  if (mode != "wal" || version != LatestSchemaVersion()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a reader needs a database in WAL mode at schema version ", LatestSchemaVersion(),
        " (opened and migrated by Store::Open); ", path, " is in journal mode \"", mode,
        "\" at version ", version));
  }
  std::unique_ptr<Store> store(new Store(std::move(db)));
  store->read_only_ = true;
  return store;
}

void Store::ReadTogether(const std::function<void()>& reads) {
  const bool together = read_only_ && db_->Exec("BEGIN").ok();
  reads();
  if (together && !db_->Exec("COMMIT").ok()) (void)db_->Exec("ROLLBACK");
}

absl::Status Store::Migrate() {
  const int latest = LatestSchemaVersion();
  DHP_ASSIGN_OR_RETURN(int64_t current, db_->QueryInt("PRAGMA user_version"));
  if (current > latest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", db_->path(), " has schema version ", current,
        ", newer than the newest this dhp-controller knows (", latest,
        "); run a dhp-controller at least as new as the one that wrote it"));
  }
  for (const Migration& migration : kMigrations) {
    if (migration.version <= current) continue;
    auto fail = [&](const absl::Status& status) {
      return absl::Status(status.code(),
                          absl::StrCat("migrating ", db_->path(), " to schema version ",
                                       migration.version, " (", migration.description,
                                       ") failed: ", status.message()));
    };
    absl::StatusOr<Transaction> tx = db_->Begin();
    if (!tx.ok()) return fail(tx.status());
    // Another process may have migrated between our read and taking the write lock.
    absl::StatusOr<int64_t> now = db_->QueryInt("PRAGMA user_version");
    if (!now.ok()) return fail(now.status());
    if (*now >= migration.version) {
      current = *now;
      continue;
    }
    absl::Status status = db_->Exec(migration.sql);
    if (status.ok()) {
      status = db_->Exec(absl::StrCat("PRAGMA user_version = ", migration.version));
    }
    if (status.ok()) status = tx->Commit();
    if (!status.ok()) return fail(status);
    current = migration.version;
  }
  return absl::OkStatus();
}

int Store::schema_version() const {
  absl::StatusOr<int64_t> version = db_->QueryInt("PRAGMA user_version");
  DieIfError(version.status(), "reading the schema version");
  return static_cast<int>(*version);
}

// ---- jobs -----------------------------------------------------------------------------------

absl::StatusOr<std::vector<v1::Event>> Store::Commit(const JobWrite& write) {
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_ASSIGN_OR_RETURN(std::vector<v1::Event> events, WriteJob(write));
  DHP_RETURN_IF_ERROR(tx.Commit());
  return events;
}

absl::StatusOr<std::vector<v1::Event>> Store::CommitAll(const std::vector<JobWrite>& writes) {
  std::vector<v1::Event> events;
  if (writes.empty()) return events;
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  for (const JobWrite& write : writes) {
    DHP_ASSIGN_OR_RETURN(std::vector<v1::Event> added, WriteJob(write));
    events.insert(events.end(), added.begin(), added.end());
  }
  DHP_RETURN_IF_ERROR(tx.Commit());
  return events;
}

absl::Status Store::WriteLabels(const v1::Job& job, bool created) {
  if (!created) {  // a new job has none yet
    DHP_ASSIGN_OR_RETURN(ScopedStatement clear,
                         db_->Prepare("DELETE FROM job_labels WHERE job_id = ?"));
    clear->BindText(1, job.id());
    DHP_RETURN_IF_ERROR(clear->Run());
  }
  for (const auto& [key, value] : job.spec().labels()) {
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement insert,
        db_->Prepare("INSERT INTO job_labels (job_id, key, value) VALUES (?, ?, ?)"));
    insert->BindText(1, job.id()).BindText(2, key).BindText(3, value);
    DHP_RETURN_IF_ERROR(insert->Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Event>> Store::WriteJob(const JobWrite& write) {
  const v1::Job& job = write.job;
  if (job.id().empty()) {
    return absl::InvalidArgumentError("JobWrite.job.id is empty; every job needs an id");
  }
  static const google::protobuf::FieldDescriptor* const kSpec =
      v1::Job::descriptor()->FindFieldByName("spec");
  DHP_RETURN_IF_ERROR(
      CheckStorable(job, absl::StrCat("job ", job.id()), write.spec_checked ? kSpec : nullptr));
  for (const v1::Run& run : write.runs) {
    if (!run.job_id().empty() && run.job_id() != job.id()) {
      return absl::InvalidArgumentError(
          absl::StrCat("run attempt ", run.attempt(), " has job_id \"", run.job_id(),
                       "\" but the write is for job ", job.id()));
    }
    DHP_RETURN_IF_ERROR(
        CheckStorable(run, absl::StrCat("run attempt ", run.attempt(), " of job ", job.id())));
  }

  const std::string proto = job.SerializeAsString();
  if (write.create) {
    DHP_ASSIGN_OR_RETURN(bool exists, JobExists(*db_, job.id()));
    if (exists) return absl::AlreadyExistsError(absl::StrCat("job ", job.id(), " already exists"));
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement insert,
        db_->Prepare("INSERT INTO jobs (id, name, state, priority, create_us, update_us, proto, "
                     "owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
    insert->BindText(1, job.id())
        .BindText(2, job.spec().name())
        .BindInt(3, job.state())
        .BindInt(4, job.spec().priority())
        .BindInt(5, Micros(job.create_time()))
        .BindInt(6, Micros(job.update_time()))
        .BindBlob(7, proto)
        .BindText(8, job.owner());
    DHP_RETURN_IF_ERROR(insert->Run());
  } else {
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement update,
        db_->Prepare("UPDATE jobs SET name = ?, state = ?, priority = ?, create_us = ?, "
                     "update_us = ?, proto = ? WHERE id = ?"));
    update->BindText(1, job.spec().name())
        .BindInt(2, job.state())
        .BindInt(3, job.spec().priority())
        .BindInt(4, Micros(job.create_time()))
        .BindInt(5, Micros(job.update_time()))
        .BindBlob(6, proto)
        .BindText(7, job.id());
    DHP_RETURN_IF_ERROR(update->Run());
    if (db_->changes() == 0) return absl::NotFoundError(absl::StrCat("job ", job.id(), " not found"));
  }

  if (write.create || !write.labels_unchanged) {
    DHP_RETURN_IF_ERROR(WriteLabels(job, write.create));
  }

  for (const v1::Run& in : write.runs) {
    v1::Run run = in;
    run.set_job_id(job.id());
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement upsert,
        db_->Prepare("INSERT INTO runs (job_id, attempt, state, proto) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (job_id, attempt) DO UPDATE SET state = excluded.state, "
                     "proto = excluded.proto"));
    upsert->BindText(1, run.job_id())
        .BindInt(2, run.attempt())
        .BindInt(3, run.state())
        .BindBlob(4, run.SerializeAsString());
    DHP_RETURN_IF_ERROR(upsert->Run());
  }

  return AppendEvents(*db_, write.events, job.id(), "");
}

absl::StatusOr<v1::Job> Store::GetJob(const std::string& job_id) {
  std::vector<UnreadableRow> unreadable;
  {
    DHP_ASSIGN_OR_RETURN(ScopedStatement select,
                         db_->Prepare("SELECT rowid, id, proto, id, '' FROM jobs WHERE id = ?"));
    select->BindText(1, job_id);
    DHP_ASSIGN_OR_RETURN(RowsRead<v1::Job> read, ReadRows<v1::Job>(*select, "jobs"));
    if (!read.rows.empty()) return std::move(read.rows[0]);
    unreadable = std::move(read.unreadable);
  }
  if (!Quarantine(unreadable)) {
    return absl::DataLossError(absl::StrCat("job ", job_id, " cannot be read: ",
                                            unreadable[0].reason, " (see the controller's log)"));
  }
  return NotFound("jobs", job_id, absl::StrCat("job ", job_id));
}

absl::StatusOr<JobPage> Store::ListJobs(const JobQuery& query) {
  if (query.limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit must be positive (0 means the default, 50); got ", query.limit));
  }
  if (query.before_seq < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "before_seq must be a next_before_seq from an earlier page, or 0; got ",
        query.before_seq));
  }
  const int limit = query.limit == 0 ? 50 : query.limit;

  // The statement's shape depends only on how many states and labels are asked for, so the
  // statement cache holds a handful of variants.
  std::string sql = "SELECT seq, id, proto, id, '' FROM jobs WHERE seq < ?";
  if (!query.owner.empty()) sql += " AND owner = ?";
  if (!query.states.empty()) {
    sql += " AND state IN (";
    for (size_t i = 0; i < query.states.size(); ++i) sql += i == 0 ? "?" : ", ?";
    sql += ")";
  }
  for (size_t i = 0; i < query.labels.size(); ++i) {
    sql += " AND EXISTS (SELECT 1 FROM job_labels l WHERE l.job_id = jobs.id AND l.key = ? "
           "AND l.value = ?)";
  }
  sql += " ORDER BY seq DESC LIMIT ?";

  // Unreadable rows are quarantined and the query runs again, asking for as many more rows as
  // it met (in case they could not be moved, and are skipped).
  RowsRead<v1::Job> read;
  int64_t sql_limit = 0;
  int64_t extra = 0;
  for (int pass = 0; pass < 3; ++pass) {
    sql_limit = static_cast<int64_t>(limit) + 1 + extra;  // one more: is there a next page?
    {
      DHP_ASSIGN_OR_RETURN(ScopedStatement select, db_->Prepare(sql));
      int index = 1;
      select->BindInt(index++, query.before_seq == 0 ? INT64_MAX : query.before_seq);
      if (!query.owner.empty()) select->BindText(index++, query.owner);
      for (v1::JobState state : query.states) select->BindInt(index++, state);
      for (const auto& [key, value] : query.labels) {
        select->BindText(index, key).BindText(index + 1, value);
        index += 2;
      }
      select->BindInt(index, sql_limit);
      DHP_ASSIGN_OR_RETURN(read, ReadRows<v1::Job>(*select, "jobs"));
    }
    if (read.unreadable.empty()) break;
    Quarantine(read.unreadable);
    extra += static_cast<int64_t>(read.unreadable.size());
  }

  JobPage page;
  const size_t n = std::min(read.rows.size(), static_cast<size_t>(limit));
  for (size_t i = 0; i < n; ++i) page.jobs.push_back(std::move(read.rows[i]));
  if (read.rows.size() > n) {
    page.next_before_seq = read.rowids[n - 1];
  } else if (read.scanned == sql_limit && read.last_rowid > 0) {
    page.next_before_seq = read.last_rowid;  // skipped rows filled the page: go on after them
  }
  return page;
}

std::vector<v1::Run> Store::ListRuns(const std::string& job_id) {
  RowsRead<v1::Run> read = ReadAll<v1::Run>(
      *db_,
      "SELECT rowid, job_id || '#' || attempt, proto, job_id, '' FROM runs WHERE job_id = ? "
      "ORDER BY attempt",
      "runs", "ListRuns", &job_id);
  Quarantine(read.unreadable);
  return std::move(read.rows);
}

std::map<v1::JobState, int64_t> Store::CountJobsByState() {
  ScopedStatement select =
      OrDie(db_->Prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state"), "CountJobsByState");
  std::map<v1::JobState, int64_t> counts;
  while (OrDie(select->Step(), "CountJobsByState")) {
    counts[static_cast<v1::JobState>(select->ColumnInt(0))] = select->ColumnInt(1);
  }
  return counts;
}

// ---- nodes ----------------------------------------------------------------------------------

// ---- checkpoints ----------------------------------------------------------------------------

std::vector<v1::Event> Store::ListEvents(const std::string& job_id, int64_t after_id, int limit) {
  // As ListJobs: quarantine unreadable rows, then ask again for as many more rows as were met.
  RowsRead<v1::Event> read;
  int64_t extra = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const int64_t sql_limit = limit <= 0 ? -1 : limit + extra;  // negative: no limit
    {
      ScopedStatement select =
          OrDie(job_id.empty() ? db_->Prepare("SELECT id, id, proto, job_id, node_id FROM events "
                                              "WHERE id > ? ORDER BY id LIMIT ?")
                               : db_->Prepare("SELECT id, id, proto, job_id, node_id FROM events "
                                              "WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?"),
                "ListEvents");
      int index = 1;
      if (!job_id.empty()) select->BindText(index++, job_id);
      select->BindInt(index, after_id).BindInt(index + 1, sql_limit);
      read = OrDie(ReadRows<v1::Event>(*select, "events"), "ListEvents");
    }
    if (read.unreadable.empty()) break;
    Quarantine(read.unreadable);
    if (limit <= 0) break;  // every readable row is there already
    extra += static_cast<int64_t>(read.unreadable.size());
  }
  if (limit > 0 && read.rows.size() > static_cast<size_t>(limit)) read.rows.resize(limit);
  return std::move(read.rows);
}

// ---- retention ------------------------------------------------------------------------------

absl::StatusOr<std::vector<std::string>> Store::FinalJobsBefore(int64_t before_us, int limit) {
  DHP_ASSIGN_OR_RETURN(
      ScopedStatement select,
      db_->Prepare("SELECT id FROM jobs WHERE state IN (?, ?, ?) AND update_us < ? "
                   "ORDER BY update_us LIMIT ?"));
  select->BindInt(1, v1::JOB_STATE_CANCELLED)
      .BindInt(2, v1::JOB_STATE_SUCCEEDED)
      .BindInt(3, v1::JOB_STATE_FAILED)
      .BindInt(4, before_us)
      .BindInt(5, limit);
  std::vector<std::string> ids;
  while (true) {
    DHP_ASSIGN_OR_RETURN(bool row, select->Step());
    if (!row) break;
    ids.push_back(select->ColumnText(0));
  }
  return ids;
}

absl::Status Store::DeleteJob(const std::string& job_id) {
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_ASSIGN_OR_RETURN(ScopedStatement events, db_->Prepare("DELETE FROM events WHERE job_id = ?"));
  events->BindText(1, job_id);
  DHP_RETURN_IF_ERROR(events->Run());
  // Labels, runs and checkpoints go with the job (ON DELETE CASCADE).
  DHP_ASSIGN_OR_RETURN(ScopedStatement job, db_->Prepare("DELETE FROM jobs WHERE id = ?"));
  job->BindText(1, job_id);
  DHP_RETURN_IF_ERROR(job->Run());
  if (db_->changes() == 0) return absl::NotFoundError("job " + job_id + " not found");
  return tx.Commit();
}

absl::StatusOr<int64_t> Store::DeleteNodeEventsBefore(int64_t before_us) {
  DHP_ASSIGN_OR_RETURN(ScopedStatement del,
                       db_->Prepare("DELETE FROM events WHERE job_id = '' AND time_us < ?"));
  del->BindInt(1, before_us);
  DHP_RETURN_IF_ERROR(del->Run());
  return static_cast<int64_t>(db_->changes());
}

int64_t Store::LastEventId() {
  absl::StatusOr<int64_t> id = db_->QueryInt("SELECT COALESCE(MAX(id), 0) FROM events");
  DieIfError(id.status(), "LastEventId");
  return *id;
}

}  // namespace dhp::controller
