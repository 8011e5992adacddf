// Internal to the store library (store.cc, store_quarantine.cc): reading rows of the store's
// tables into messages, and appending events.
//
// A row whose stored message does not parse (written by an older build with ill-formed UTF-8 in
// a string, or damaged) is not an error of the read: it comes back as an UnreadableRow, and the
// store moves it to its quarantine table (store_quarantine.cc) instead of failing the read.
//
// Thread-safety: as Store (one thread at a time).
#ifndef DHP_CONTROLLER_STORE_INTERNAL_H_
#define DHP_CONTROLLER_STORE_INTERNAL_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "controller/sqlite_db.h"
#include "dhp/v1/job.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/timestamp.pb.h"

namespace dhp::controller::store_internal {

// The tables whose rows hold a message: a quarantined row's source.
inline constexpr const char* kRowTables[] = {"jobs", "runs", "nodes", "checkpoints", "events"};

struct UnreadableRow {
  std::string table;  // one of kRowTables
  int64_t rowid = 0;
  std::string key;      // its key, as stored (may hold ill-formed UTF-8)
  std::string job_id;   // the job it belongs to, or ""
  std::string node_id;  // the node it belongs to, or ""
  std::string blob;     // the stored message, byte for byte
  std::string reason;
};

template <typename Message>
struct RowsRead {
  std::vector<Message> rows;
  std::vector<int64_t> rowids;  // parallel to rows
  std::vector<UnreadableRow> unreadable;
  int64_t scanned = 0;     // rows stepped over, readable or not
  int64_t last_rowid = 0;  // of the last row stepped over
};

// Why `blob` does not parse as a `type`: the string field holding text that is not UTF-8
// ("spec.labels.owner: not valid UTF-8: byte 0xFF at ..."), or "" when it is not that.
std::string IllFormedStringIn(const std::string& blob, const google::protobuf::Descriptor* type);

// DATA_LOSS when `blob` does not parse as a Message, saying why when it can.
template <typename Message>
absl::StatusOr<Message> ParseRow(const std::string& blob) {
  Message message;
  if (!message.ParseFromString(blob)) {
    const std::string why = IllFormedStringIn(blob, Message::descriptor());
    return absl::DataLossError(absl::StrCat("the stored ", blob.size(), "-byte message does not ",
                                            "parse as ", Message::descriptor()->full_name(), ": ",
                                            why.empty() ? "the bytes are damaged" : why));
  }
  return message;
}

// Every row of `select`, whose columns are: 0 rowid, 1 key, 2 the serialized message, 3 job id,
// 4 node id. Events and checkpoints take their id from the rowid (it is not kept in the blob).
// An error only when SQLite fails.
template <typename Message>
absl::StatusOr<RowsRead<Message>> ReadRows(Statement& select, const char* table) {
  RowsRead<Message> out;
  while (true) {
    absl::StatusOr<bool> row = select.Step();
    if (!row.ok()) return row.status();
    if (!*row) return out;
    ++out.scanned;
    const int64_t rowid = select.ColumnInt(0);
    out.last_rowid = rowid;
    std::string blob = select.ColumnBlob(2);
    absl::StatusOr<Message> message = ParseRow<Message>(blob);
    if (!message.ok()) {
      out.unreadable.push_back(UnreadableRow{
          table, rowid, select.ColumnText(1), select.ColumnText(3), select.ColumnText(4),
          std::move(blob), std::string(message.status().message())});
      continue;
    }
    if constexpr (std::is_same_v<Message, v1::Event> || std::is_same_v<Message, v1::Checkpoint>) {
      message->set_id(rowid);
    }
    out.rows.push_back(*std::move(message));
    out.rowids.push_back(rowid);
  }
}

// Appends events, filling an empty job_id / node_id from the defaults (inside the caller's
// transaction). Returns them with their ids. INVALID_ARGUMENT for a string field that is not
// UTF-8.
absl::StatusOr<std::vector<v1::Event>> AppendEvents(SqliteDb& db,
                                                    const std::vector<v1::Event>& events,
                                                    const std::string& default_job_id,
                                                    const std::string& default_node_id);

// Whether jobs holds a row with this id.
absl::StatusOr<bool> JobExists(SqliteDb& db, const std::string& job_id);

// A Timestamp in microseconds since the epoch (the stored *_us columns).
int64_t Micros(const google::protobuf::Timestamp& t);

// For the read methods whose signatures carry no Status: a failing SQLite call on our own
// database is a broken invariant, so the controller stops loudly (see store.cc).
void DieIfError(const absl::Status& status, const char* what);

template <typename T>
T OrDie(absl::StatusOr<T> value, const char* what) {
  DieIfError(value.status(), what);
  return std::move(*value);
}

// Every row of `sql` (ReadRows' columns), `key` bound to its one parameter when given; the
// statement is done with when this returns, so the caller may quarantine what was unreadable.
// `what` names the caller should SQLite fail (OrDie).
template <typename Message>
RowsRead<Message> ReadAll(SqliteDb& db, const char* sql, const char* table, const char* what,
                          const std::string* key = nullptr) {
  ScopedStatement select = OrDie(db.Prepare(sql), what);
  if (key != nullptr) select->BindText(1, *key);
  return OrDie(ReadRows<Message>(*select, table), what);
}

// INVALID_ARGUMENT naming the field when `msg` holds a string that is not UTF-8 (protobuf would
// write it, and then refuse to parse the row again); `what` names the row.
// `skip`: a field of `msg` itself that was checked already (JobWrite::spec_checked).
absl::Status CheckStorable(const google::protobuf::Message& msg, const std::string& what,
                           const google::protobuf::FieldDescriptor* skip = nullptr);

}  // namespace dhp::controller::store_internal

#endif  // DHP_CONTROLLER_STORE_INTERNAL_H_
