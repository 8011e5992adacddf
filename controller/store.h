// Store: the controller's durable state in SQLite (WAL mode).
//
// Holds jobs, runs, nodes, checkpoints, the append-only event history, and the rendezvous keys
// of run attempts while their ranks bootstrap. Every state change
// is one transaction (Commit), so a crash at any point leaves either all of a change or none of
// it. The schema is versioned (PRAGMA user_version) and migrated forward on Open.
//
// Queryable fields (state, labels, times) are columns; each row also keeps the full proto so
// that fields added later round-trip without a migration.
//
// Unreadable rows: a message that does not parse (ill-formed UTF-8 in a string, written by an
// older build; a damaged blob) never fails a read or stops the process. The read skips the row
// and moves it, in one transaction, from its table into the `quarantine` table (a job's runs and
// checkpoints go with it), appends a "store.quarantine" event naming table, key and reason, logs
// it, and tells the quarantine listener (the controller counts dhp_store_quarantined_rows_total
// {table} and exports what the table holds as dhp_store_quarantine_rows{table}).
// The blob is kept byte for byte for an operator. Writes check every string field first, so the
// store never writes a row it could not read back (INVALID_ARGUMENT naming the field).
// A failing SQLite call on a read path that returns no Status (I/O error, a corrupt database
// page) still stops the process loudly: that is not one bad row.
//
// Thread-safety: not thread-safe. The controller calls it only from its io_context thread, and
// a reader (OpenReader) from one thread at a time under its own lock.
#ifndef DHP_CONTROLLER_STORE_H_
#define DHP_CONTROLLER_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dhp/v1/job.pb.h"
#include "dhp/v1/node.pb.h"

namespace dhp::controller {

class SqliteDb;
class WalCheckpointer;
namespace store_internal {
struct UnreadableRow;
}

// A row that could not be read, as held in the quarantine table.
struct QuarantinedRow {
  int64_t id = 0;       // in the quarantine table
  std::string table;    // where it was: jobs, runs, nodes, checkpoints or events
  std::string key;      // its key there: job id, "job_id#attempt", node id, checkpoint or event
                        // id; ill-formed UTF-8 written as \xNN
  std::string reason;   // why it could not be read
  int64_t time_us = 0;  // when it was moved
};

// One state change of a job: the job row, the runs it touches and the events it records.
struct JobWrite {
  v1::Job job;                    // the whole row after the change
  bool create = false;            // insert (ALREADY_EXISTS if the id is taken) or update
                                  // (NOT_FOUND if missing)
  std::vector<v1::Run> runs;      // inserted or replaced by (job_id, attempt)
  std::vector<v1::Event> events;  // appended; ids are assigned by the store
  // An update whose job.spec.labels are those already stored: the job_labels rows are left as
  // they are (one DELETE and an INSERT per label saved, about half of a progress save's cost
  // with 4 labels). Ignored on create. Set only where the labels are known to be unchanged.
  bool labels_unchanged = false;
  // job.spec was checked for ill-formed UTF-8 already (JobManager::ValidateSubmission, off the
  // loop), or was read from the store and left as it was (a stored row that parsed holds only
  // UTF-8): the write checks the rest of the job only. Set only where that is so.
  bool spec_checked = false;
};

struct JobQuery {
  std::vector<v1::JobState> states;           // any of; empty: all
  std::map<std::string, std::string> labels;  // all must match
  std::string owner;                          // only this owner's; empty: anyone's
  int limit = 50;                             // 0: the default (50); negative: INVALID_ARGUMENT
  int64_t before_seq = 0;                     // page: only jobs older than this; 0: newest
};

// One change of a run attempt's rendezvous KV (controller/rendezvous_kv.h): a key set or
// deleted, with the answer to the request that made it when that request has an id.
struct KvWrite {
  std::string job_id;
  int attempt = 0;
  std::string key;
  std::optional<std::string> value;  // the key's new value; nullopt: the key is deleted
  std::string request_id;            // non-empty: `reply` is remembered for it
  int64_t reply = 0;
};

// The rendezvous KV of one run attempt, as stored.
struct StoredKvScope {
  std::string job_id;
  int attempt = 0;
  std::map<std::string, std::string> keys;
  std::map<std::string, int64_t> replies;  // by request id
};

struct JobPage {
  std::vector<v1::Job> jobs;                  // newest first
  int64_t next_before_seq = 0;                // 0 when there are no more
};

class Store {
 public:
  // Opens (creating if needed) the database at `path` (":memory:" for tests), enables WAL and
  // foreign keys, and migrates the schema to the newest version.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  // A second, read-only connection to a file database that Open has already opened and
  // migrated (FAILED_PRECONDITION when its schema is not the newest): another thread reads on
  // it while the first connection writes (WAL readers see every transaction committed before
  // each statement starts). Writes fail with FAILED_PRECONDITION. Unreadable rows are skipped,
  // not moved: the writing connection quarantines them when it meets them.
  static absl::StatusOr<std::unique_ptr<Store>> OpenReader(const std::string& path);
  ~Store();

  int schema_version() const;

  // A reader's (OpenReader) reads in one read transaction: one snapshot and one WAL read lock
  // for all of them, instead of one per statement (each a pair of fcntl calls; the metrics
  // scrape reads 3 rows of each of 10,000 jobs). Keep `reads` short: the WAL cannot start over
  // while a read transaction holds an old snapshot. On a writing connection (which may
  // quarantine a row it reads: a write) the reads run as they are, one statement at a time.
  void ReadTogether(const std::function<void()>& reads);
  // The schema version this code migrates to (the newest it knows).
  static int LatestSchemaVersion();

  // Applies the change in one transaction. Returns the appended events with their ids.
  absl::StatusOr<std::vector<v1::Event>> Commit(const JobWrite& write);
  // Applies all the changes in one transaction (all or none: the first that fails rolls the
  // others back too), e.g. the progress of many runs in one tick. Returns the appended events.
  absl::StatusOr<std::vector<v1::Event>> CommitAll(const std::vector<JobWrite>& writes);

  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);  // NOT_FOUND names the id
  absl::StatusOr<JobPage> ListJobs(const JobQuery& query);
  std::vector<v1::Run> ListRuns(const std::string& job_id);  // by attempt, ascending
  std::map<v1::JobState, int64_t> CountJobsByState();

  // Nodes: insert or replace, with events, in one transaction.
  absl::StatusOr<std::vector<v1::Event>> PutNode(const v1::Node& node,
                                                 const std::vector<v1::Event>& events);
  // Several nodes (no events) in one transaction: the batched heartbeat times.
  absl::Status PutNodes(const std::vector<v1::Node>& nodes);
  absl::StatusOr<v1::Node> GetNode(const std::string& node_id);
  std::vector<v1::Node> ListNodes();  // by id

  // Checkpoints. AddCheckpoint returns the stored record with its id.
  absl::StatusOr<v1::Checkpoint> AddCheckpoint(const v1::Checkpoint& ckpt,
                                               const std::vector<v1::Event>& events);
  std::vector<v1::Checkpoint> ListCheckpoints(const std::string& job_id);  // by step, ascending
  // Replaces the stored record with the same id (state, shards, size), with events.
  // Both return the appended events with their ids.
  absl::StatusOr<std::vector<v1::Event>> UpdateCheckpoint(const v1::Checkpoint& ckpt,
                                                          const std::vector<v1::Event>& events);
  absl::StatusOr<std::vector<v1::Event>> DeleteCheckpoint(
      int64_t id, const std::vector<v1::Event>& events = {});

  // Events with id > after_id, ascending; job_id empty: all events. limit <= 0: no limit.
  std::vector<v1::Event> ListEvents(const std::string& job_id, int64_t after_id, int limit);

  // Retention. Ids of final jobs (CANCELLED, SUCCEEDED, FAILED) last changed before
  // `before_us`, oldest first, at most `limit`.
  absl::StatusOr<std::vector<std::string>> FinalJobsBefore(int64_t before_us, int limit);
  // Deletes a job with its labels, runs, checkpoint records (not their files) and events, in
  // one transaction. NOT_FOUND if it is not stored.
  absl::Status DeleteJob(const std::string& job_id);
  // Deletes node events (those of no job) older than `before_us`; returns how many.
  absl::StatusOr<int64_t> DeleteNodeEventsBefore(int64_t before_us);
  int64_t LastEventId();

  // The rendezvous KV (store_kv.cc): the keys of run attempts whose ranks bootstrap, kept so
  // that a controller restart does not lose them. One transaction per change: a few per rank
  // and process group while an attempt bootstraps, none while it trains.
  absl::Status WriteKv(const KvWrite& write);
  // Deletes an attempt's keys and replies (its run ended).
  absl::Status DeleteKvScope(const std::string& job_id, int attempt);
  // Deletes the keys and replies of attempts whose run has ended or is not stored (the
  // controller stopped before it deleted them), then returns the rest, by (job id, attempt).
  absl::StatusOr<std::vector<StoredKvScope>> LoadKv();

  // Exports (store_exports.cc): ExportCheckpoint's records. PutExport inserts or replaces by
  // id (NOT_FOUND when its job is not stored); they go with their job (DeleteJob, retention).
  absl::Status PutExport(const v1::Export& e);
  absl::StatusOr<v1::Export> GetExport(const std::string& id);  // NOT_FOUND names the id
  absl::StatusOr<std::vector<v1::Export>> ListExports(const std::string& job_id);  // newest first
  // Every export in one of `states`, oldest first.
  absl::StatusOr<std::vector<v1::Export>> ListExportsInStates(
      const std::vector<v1::ExportState>& states);

  // Quarantine (see above). The listener is called once per row moved, on the calling thread,
  // after the move has committed; empty: none.
  // The database's files and their sizes in bytes ("db", and "wal" while it exists); empty for
  // an in-memory database. Thread-safe (reads the file system only).
  std::map<std::string, int64_t> FileBytes() const;
  // Reports each time the WAL checkpointer holds this store's writers (wal_checkpointer.h); a
  // no-op for an in-memory database. Thread-safe; null stops the reports.
  void set_wal_hold_observer(std::function<void(const char* kind, double seconds)> observer);

  void set_quarantine_listener(std::function<void(const QuarantinedRow&)> listener);
  std::vector<QuarantinedRow> ListQuarantined();       // oldest first
  std::map<std::string, int64_t> CountQuarantined();   // by table; every table, zero included

 private:
  explicit Store(std::unique_ptr<SqliteDb> db);
  absl::Status Migrate();
  // One JobWrite's rows, inside the caller's transaction.
  absl::StatusOr<std::vector<v1::Event>> WriteJob(const JobWrite& write);
  // Replaces the job's job_labels rows with its spec.labels, inside the caller's transaction
  // (`created`: the job's row is new, so it has no rows to replace).
  absl::Status WriteLabels(const v1::Job& job, bool created);

  // Moves each row to the quarantine table (store_quarantine.cc). True when every row was
  // moved (or was already gone); a row that cannot be moved is logged once and left in place.
  bool Quarantine(const std::vector<store_internal::UnreadableRow>& rows);
  absl::StatusOr<QuarantinedRow> MoveToQuarantine(const store_internal::UnreadableRow& row);
  // NOT_FOUND for `what` (e.g. "job j-1"), saying so when the row was quarantined.
  absl::Status NotFound(const char* table, const std::string& key, const std::string& what);

  // Held by each of db_'s write transactions and by the checkpointer when it must hold writers
  // off (SqliteDb::set_write_gate); declared first, so it outlives both.
  std::mutex write_gate_;
  std::unique_ptr<SqliteDb> db_;
  bool read_only_ = false;                         // OpenReader
  std::unique_ptr<WalCheckpointer> checkpointer_;  // file databases only
  std::function<void(const QuarantinedRow&)> quarantine_listener_;
  std::set<std::pair<std::string, int64_t>> unmovable_;  // (table, rowid) logged as unmovable
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_STORE_H_
