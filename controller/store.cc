#include "controller/store.h"

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "controller/sqlite_db.h"
#include "controller/wal_checkpointer.h"
#include "google/protobuf/util/time_util.h"

namespace dhp::controller {
namespace {

#define DHP_STORE_CONCAT_INNER(a, b) a##b
#define DHP_STORE_CONCAT(a, b) DHP_STORE_CONCAT_INNER(a, b)
#define DHP_STORE_RETURN_IF_ERROR(expr)      \
  do {                                       \
    absl::Status _dhp_status = (expr);       \
    if (!_dhp_status.ok()) return _dhp_status; \
  } while (0)
#define DHP_STORE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(*tmp)
#define DHP_STORE_ASSIGN_OR_RETURN(lhs, expr) \
  DHP_STORE_ASSIGN_OR_RETURN_IMPL(DHP_STORE_CONCAT(_dhp_or_, __LINE__), lhs, expr)

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
};

int64_t Micros(const google::protobuf::Timestamp& t) {
  return google::protobuf::util::TimeUtil::TimestampToMicroseconds(t);
}

// For the read methods whose signatures carry no Status: a failing read of our own database is a
// broken invariant (corruption, I/O error), and guessing an empty answer would mislead the
// supervisor, so the controller stops loudly.
void DieIfError(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "dhp store: %s failed: %s\n", what, status.ToString().c_str());
  std::abort();
}

template <typename Message>
absl::StatusOr<Message> ParseRow(const std::string& blob, absl::string_view what) {
  Message message;
  if (!message.ParseFromString(blob)) {
    return absl::DataLossError(absl::StrCat("stored ", what, " does not parse as ",
                                            Message::descriptor()->full_name(),
                                            "; the database may be corrupt"));
  }
  return message;
}

// Appends events, filling an empty job_id / node_id from the defaults. Returns them with ids.
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
    DHP_STORE_ASSIGN_OR_RETURN(
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
    DHP_STORE_RETURN_IF_ERROR(insert->Run());
    event.set_id(db.last_insert_rowid());
    out.push_back(std::move(event));
  }
  return out;
}

absl::StatusOr<bool> JobExists(SqliteDb& db, const std::string& job_id) {
  DHP_STORE_ASSIGN_OR_RETURN(ScopedStatement select,
                             db.Prepare("SELECT 1 FROM jobs WHERE id = ?"));
  select->BindText(1, job_id);
  return select->Step();
}

// Every row of `select`: column 0 the row's key (an event's or checkpoint's id, which is not
// kept in the blob), column 1 the serialized message.
template <typename Message>
absl::StatusOr<std::vector<Message>> ReadRows(Statement& select, absl::string_view what) {
  std::vector<Message> out;
  while (true) {
    DHP_STORE_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return out;
    DHP_STORE_ASSIGN_OR_RETURN(
        Message message,
        ParseRow<Message>(select.ColumnBlob(1), absl::StrCat(what, " ", select.ColumnText(0))));
    if constexpr (std::is_same_v<Message, v1::Event> || std::is_same_v<Message, v1::Checkpoint>) {
      message.set_id(select.ColumnInt(0));
    }
    out.push_back(std::move(message));
  }
}

template <typename T>
T OrDie(absl::StatusOr<T> value, const char* what) {
  DieIfError(value.status(), what);
  return std::move(*value);
}

}  // namespace

// ---- opening and migrating ------------------------------------------------------------------

Store::Store(std::unique_ptr<SqliteDb> db) : db_(std::move(db)) {}
Store::~Store() {
  checkpointer_.reset();  // stop checkpointing before the main connection closes
}

int Store::LatestSchemaVersion() { return std::end(kMigrations)[-1].version; }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  DHP_STORE_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  // Foreign keys are per connection and off by default; PRAGMA foreign_keys is a no-op inside a
  // transaction, so set it before anything else.
  DHP_STORE_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys = ON"));
  DHP_STORE_ASSIGN_OR_RETURN(std::string mode, db->QueryText("PRAGMA journal_mode = WAL"));
  if (mode != "wal" && mode != "memory") {  // an in-memory database has no journal file
    return absl::FailedPreconditionError(
        absl::StrCat("cannot enable WAL mode on ", path, ": journal_mode stays \"", mode,
                     "\"; put the database on a local file system"));
  }
  // In WAL mode NORMAL loses at most the last transactions on power loss, never consistency.
  DHP_STORE_RETURN_IF_ERROR(db->Exec("PRAGMA synchronous = NORMAL"));
  std::unique_ptr<Store> store(new Store(std::move(db)));
  DHP_STORE_RETURN_IF_ERROR(store->Migrate());
  if (mode == "wal") {
    // Checkpoint from a background thread instead of inside whichever commit crosses the
    // threshold (see wal_checkpointer.h).
    DHP_STORE_RETURN_IF_ERROR(store->db_->Exec("PRAGMA wal_autocheckpoint = 0"));
    DHP_STORE_ASSIGN_OR_RETURN(store->checkpointer_, WalCheckpointer::Start(path));
  }
  return store;
}

absl::Status Store::Migrate() {
  const int latest = LatestSchemaVersion();
  DHP_STORE_ASSIGN_OR_RETURN(int64_t current, db_->QueryInt("PRAGMA user_version"));
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
  const v1::Job& job = write.job;
  if (job.id().empty()) {
    return absl::InvalidArgumentError("JobWrite.job.id is empty; every job needs an id");
  }
  for (const v1::Run& run : write.runs) {
    if (!run.job_id().empty() && run.job_id() != job.id()) {
      return absl::InvalidArgumentError(
          absl::StrCat("run attempt ", run.attempt(), " has job_id \"", run.job_id(),
                       "\" but the write is for job ", job.id()));
    }
  }

  DHP_STORE_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  const std::string proto = job.SerializeAsString();
  if (write.create) {
    DHP_STORE_ASSIGN_OR_RETURN(bool exists, JobExists(*db_, job.id()));
    if (exists) return absl::AlreadyExistsError(absl::StrCat("job ", job.id(), " already exists"));
    DHP_STORE_ASSIGN_OR_RETURN(
        ScopedStatement insert,
        db_->Prepare("INSERT INTO jobs (id, name, state, priority, create_us, update_us, proto) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)"));
    insert->BindText(1, job.id())
        .BindText(2, job.spec().name())
        .BindInt(3, job.state())
        .BindInt(4, job.spec().priority())
        .BindInt(5, Micros(job.create_time()))
        .BindInt(6, Micros(job.update_time()))
        .BindBlob(7, proto);
    DHP_STORE_RETURN_IF_ERROR(insert->Run());
  } else {
    DHP_STORE_ASSIGN_OR_RETURN(
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
    DHP_STORE_RETURN_IF_ERROR(update->Run());
    if (db_->changes() == 0) return absl::NotFoundError(absl::StrCat("job ", job.id(), " not found"));
  }

  {
    DHP_STORE_ASSIGN_OR_RETURN(ScopedStatement clear,
                               db_->Prepare("DELETE FROM job_labels WHERE job_id = ?"));
    clear->BindText(1, job.id());
    DHP_STORE_RETURN_IF_ERROR(clear->Run());
  }
  for (const auto& [key, value] : job.spec().labels()) {
    DHP_STORE_ASSIGN_OR_RETURN(
        ScopedStatement insert,
        db_->Prepare("INSERT INTO job_labels (job_id, key, value) VALUES (?, ?, ?)"));
    insert->BindText(1, job.id()).BindText(2, key).BindText(3, value);
    DHP_STORE_RETURN_IF_ERROR(insert->Run());
  }

  for (const v1::Run& in : write.runs) {
    v1::Run run = in;
    run.set_job_id(job.id());
    DHP_STORE_ASSIGN_OR_RETURN(
        ScopedStatement upsert,
        db_->Prepare("INSERT INTO runs (job_id, attempt, state, proto) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (job_id, attempt) DO UPDATE SET state = excluded.state, "
                     "proto = excluded.proto"));
    upsert->BindText(1, run.job_id())
        .BindInt(2, run.attempt())
        .BindInt(3, run.state())
        .BindBlob(4, run.SerializeAsString());
    DHP_STORE_RETURN_IF_ERROR(upsert->Run());
  }

  DHP_STORE_ASSIGN_OR_RETURN(std::vector<v1::Event> events,
                             AppendEvents(*db_, write.events, job.id(), ""));
  DHP_STORE_RETURN_IF_ERROR(tx.Commit());
  return events;
}

absl::StatusOr<v1::Job> Store::GetJob(const std::string& job_id) {
  DHP_STORE_ASSIGN_OR_RETURN(ScopedStatement select,
                             db_->Prepare("SELECT proto FROM jobs WHERE id = ?"));
  select->BindText(1, job_id);
  DHP_STORE_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  return ParseRow<v1::Job>(select->ColumnBlob(0), absl::StrCat("job ", job_id));
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
  std::string sql = "SELECT seq, proto FROM jobs WHERE seq < ?";
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

  DHP_STORE_ASSIGN_OR_RETURN(ScopedStatement select, db_->Prepare(sql));
  int index = 1;
  select->BindInt(index++, query.before_seq == 0 ? INT64_MAX : query.before_seq);
  for (v1::JobState state : query.states) select->BindInt(index++, state);
  for (const auto& [key, value] : query.labels) {
    select->BindText(index, key).BindText(index + 1, value);
    index += 2;
  }
  select->BindInt(index, static_cast<int64_t>(limit) + 1);  // one more: is there a next page?

  JobPage page;
  int64_t last_seq = 0;
  while (true) {
    DHP_STORE_ASSIGN_OR_RETURN(bool row, select->Step());
    if (!row) break;
    if (static_cast<int>(page.jobs.size()) == limit) {
      page.next_before_seq = last_seq;
      break;
    }
    last_seq = select->ColumnInt(0);
    DHP_STORE_ASSIGN_OR_RETURN(
        v1::Job job, ParseRow<v1::Job>(select->ColumnBlob(1), absl::StrCat("job #", last_seq)));
    page.jobs.push_back(std::move(job));
  }
  return page;
}

std::vector<v1::Run> Store::ListRuns(const std::string& job_id) {
  ScopedStatement select = OrDie(
      db_->Prepare("SELECT attempt, proto FROM runs WHERE job_id = ? ORDER BY attempt"),
      "ListRuns");
  select->BindText(1, job_id);
  return OrDie(ReadRows<v1::Run>(*select, absl::StrCat("run of job ", job_id, ", attempt")),
               "ListRuns");
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

absl::StatusOr<std::vector<v1::Event>> Store::PutNode(const v1::Node& node,
                                                      const std::vector<v1::Event>& events) {
  if (node.id().empty()) return absl::InvalidArgumentError("node.id is empty; every node needs an id");
  DHP_STORE_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_STORE_ASSIGN_OR_RETURN(
      ScopedStatement upsert,
      db_->Prepare("INSERT INTO nodes (id, hostname, state, last_heartbeat_us, proto) "
                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                   "hostname = excluded.hostname, state = excluded.state, "
                   "last_heartbeat_us = excluded.last_heartbeat_us, proto = excluded.proto"));
  upsert->BindText(1, node.id())
      .BindText(2, node.hostname())
      .BindInt(3, node.state())
      .BindInt(4, Micros(node.last_heartbeat_time()))
      .BindBlob(5, node.SerializeAsString());
  DHP_STORE_RETURN_IF_ERROR(upsert->Run());
  DHP_STORE_ASSIGN_OR_RETURN(std::vector<v1::Event> out,
                             AppendEvents(*db_, events, "", node.id()));
  DHP_STORE_RETURN_IF_ERROR(tx.Commit());
  return out;
}

absl::StatusOr<v1::Node> Store::GetNode(const std::string& node_id) {
  DHP_STORE_ASSIGN_OR_RETURN(ScopedStatement select,
                             db_->Prepare("SELECT proto FROM nodes WHERE id = ?"));
  select->BindText(1, node_id);
  DHP_STORE_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) return absl::NotFoundError(absl::StrCat("node ", node_id, " not found"));
  return ParseRow<v1::Node>(select->ColumnBlob(0), absl::StrCat("node ", node_id));
}

std::vector<v1::Node> Store::ListNodes() {
  ScopedStatement select =
      OrDie(db_->Prepare("SELECT id, proto FROM nodes ORDER BY id"), "ListNodes");
  return OrDie(ReadRows<v1::Node>(*select, "node"), "ListNodes");
}

// ---- checkpoints ----------------------------------------------------------------------------

absl::StatusOr<v1::Checkpoint> Store::AddCheckpoint(const v1::Checkpoint& ckpt,
                                                    const std::vector<v1::Event>& events) {
  if (ckpt.job_id().empty()) {
    return absl::InvalidArgumentError("checkpoint.job_id is empty; a checkpoint belongs to a job");
  }
  DHP_STORE_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_STORE_ASSIGN_OR_RETURN(bool exists, JobExists(*db_, ckpt.job_id()));
  if (!exists) {
    return absl::NotFoundError(
        absl::StrCat("job ", ckpt.job_id(), " not found; cannot record a checkpoint for it"));
  }
  v1::Checkpoint stored = ckpt;
  stored.set_id(0);
  DHP_STORE_ASSIGN_OR_RETURN(
      ScopedStatement insert,
      db_->Prepare("INSERT INTO checkpoints (job_id, attempt, step, path, size_bytes, create_us, "
                   "proto) VALUES (?, ?, ?, ?, ?, ?, ?)"));
  insert->BindText(1, stored.job_id())
      .BindInt(2, stored.attempt())
      .BindInt(3, stored.step())
      .BindText(4, stored.path())
      .BindInt(5, stored.size_bytes())
      .BindInt(6, Micros(stored.create_time()))
      .BindBlob(7, stored.SerializeAsString());
  DHP_STORE_RETURN_IF_ERROR(insert->Run());
  stored.set_id(db_->last_insert_rowid());
  DHP_STORE_RETURN_IF_ERROR(AppendEvents(*db_, events, stored.job_id(), "").status());
  DHP_STORE_RETURN_IF_ERROR(tx.Commit());
  return stored;
}

std::vector<v1::Checkpoint> Store::ListCheckpoints(const std::string& job_id) {
  ScopedStatement select = OrDie(
      db_->Prepare("SELECT id, proto FROM checkpoints WHERE job_id = ? ORDER BY step, id"),
      "ListCheckpoints");
  select->BindText(1, job_id);
  return OrDie(ReadRows<v1::Checkpoint>(*select, "checkpoint"), "ListCheckpoints");
}

absl::StatusOr<std::vector<v1::Event>> Store::UpdateCheckpoint(
    const v1::Checkpoint& ckpt, const std::vector<v1::Event>& events) {
  DHP_STORE_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_STORE_ASSIGN_OR_RETURN(
      ScopedStatement update,
      db_->Prepare("UPDATE checkpoints SET size_bytes = ?, proto = ? WHERE id = ?"));
  update->BindInt(1, ckpt.size_bytes()).BindBlob(2, ckpt.SerializeAsString()).BindInt(3, ckpt.id());
  DHP_STORE_RETURN_IF_ERROR(update->Run());
  if (db_->changes() == 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", ckpt.id(), " not found"));
  }
  DHP_STORE_ASSIGN_OR_RETURN(std::vector<v1::Event> added,
                             AppendEvents(*db_, events, ckpt.job_id(), ""));
  DHP_STORE_RETURN_IF_ERROR(tx.Commit());
  return added;
}

absl::StatusOr<std::vector<v1::Event>> Store::DeleteCheckpoint(
    int64_t id, const std::vector<v1::Event>& events) {
  DHP_STORE_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_STORE_ASSIGN_OR_RETURN(ScopedStatement del,
                             db_->Prepare("DELETE FROM checkpoints WHERE id = ?"));
  del->BindInt(1, id);
  DHP_STORE_RETURN_IF_ERROR(del->Run());
  if (db_->changes() == 0) return absl::NotFoundError(absl::StrCat("checkpoint ", id, " not found"));
  DHP_STORE_ASSIGN_OR_RETURN(std::vector<v1::Event> added, AppendEvents(*db_, events, "", ""));
  DHP_STORE_RETURN_IF_ERROR(tx.Commit());
  return added;
}

// ---- events ---------------------------------------------------------------------------------

std::vector<v1::Event> Store::ListEvents(const std::string& job_id, int64_t after_id, int limit) {
  const int64_t sql_limit = limit <= 0 ? -1 : limit;  // SQLite: a negative LIMIT is no limit
  ScopedStatement select = OrDie(
      job_id.empty()
          ? db_->Prepare("SELECT id, proto FROM events WHERE id > ? ORDER BY id LIMIT ?")
          : db_->Prepare("SELECT id, proto FROM events WHERE job_id = ? AND id > ? "
                         "ORDER BY id LIMIT ?"),
      "ListEvents");
  int index = 1;
  if (!job_id.empty()) select->BindText(index++, job_id);
  select->BindInt(index, after_id).BindInt(index + 1, sql_limit);
  return OrDie(ReadRows<v1::Event>(*select, "event"), "ListEvents");
}

int64_t Store::LastEventId() {
  absl::StatusOr<int64_t> id = db_->QueryInt("SELECT COALESCE(MAX(id), 0) FROM events");
  DieIfError(id.status(), "LastEventId");
  return *id;
}

#undef DHP_STORE_ASSIGN_OR_RETURN
#undef DHP_STORE_ASSIGN_OR_RETURN_IMPL
#undef DHP_STORE_RETURN_IF_ERROR
#undef DHP_STORE_CONCAT
#undef DHP_STORE_CONCAT_INNER

}  // namespace dhp::controller
