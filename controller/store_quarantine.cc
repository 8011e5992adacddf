// Store: moving rows that cannot be read into the quarantine table (see store.h).
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/utf8.h"
#include "controller/sqlite_db.h"
#include "controller/store.h"
#include "controller/store_internal.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "google/protobuf/util/time_util.h"

namespace dhp::controller {

using store_internal::UnreadableRow;

namespace {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool IsRowTable(const std::string& table) {
  for (const char* t : store_internal::kRowTables) {
    if (table == t) return true;
  }
  return false;
}

// `text` when it is UTF-8 (fit for an event's string field), else "".
std::string IfUtf8(const std::string& text) {
  return InvalidUtf8At(text) == std::string_view::npos ? text : std::string();
}

absl::Status Run(SqliteDb& db, const std::string& sql,
                 const std::function<void(Statement&)>& bind) {
  absl::StatusOr<ScopedStatement> stmt = db.Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  bind(**stmt);
  return (*stmt)->Run();
}

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

std::string Join(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

// Reads `bytes` field by field as wire format (which checks no UTF-8), looking for a string
// field of `type` whose text is ill-formed. `depth` bounds the recursion on damaged input.
std::string FindIllFormed(const std::string& bytes, const Descriptor* type, const std::string& path,
                          int depth) {
  UnknownFieldSet fields;
  if (depth > 64 || !fields.ParseFromString(bytes)) return "";
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& f = fields.field(i);
    const FieldDescriptor* fd = type->FindFieldByNumber(f.number());
    if (fd == nullptr || f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const std::string& value = f.length_delimited();
    std::string field_path = Join(path, fd->name());
    if (fd->type() == FieldDescriptor::TYPE_STRING) {
      const std::string bad = Utf8Error(value);
      if (!bad.empty()) return field_path + ": " + bad;
    } else if (fd->is_map()) {
      // An entry: key = 1, value = 2. Named by its key, as in "spec.labels.owner".
      const Descriptor* entry = fd->message_type();
      UnknownFieldSet kv;
      if (!kv.ParseFromString(value)) continue;
      const std::string* key = nullptr;
      const std::string* val = nullptr;
      for (int k = 0; k < kv.field_count(); ++k) {
        if (kv.field(k).type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
        if (kv.field(k).number() == 1) key = &kv.field(k).length_delimited();
        if (kv.field(k).number() == 2) val = &kv.field(k).length_delimited();
      }
      if (key != nullptr && entry->map_key()->type() == FieldDescriptor::TYPE_STRING &&
          !Utf8Error(*key).empty()) {
        return field_path + " (a key): " + Utf8Error(*key);
      }
      const std::string entry_path = Join(field_path, key != nullptr ? *key : "?");
      const FieldDescriptor* value_field = entry->map_value();
      if (val == nullptr) continue;
      if (value_field->type() == FieldDescriptor::TYPE_STRING) {
        const std::string bad = Utf8Error(*val);
        if (!bad.empty()) return entry_path + ": " + bad;
      } else if (value_field->type() == FieldDescriptor::TYPE_MESSAGE) {
        const std::string found =
            FindIllFormed(*val, value_field->message_type(), entry_path, depth + 1);
        if (!found.empty()) return found;
      }
    } else if (fd->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (fd->is_repeated()) field_path += "[]";
      const std::string found = FindIllFormed(value, fd->message_type(), field_path, depth + 1);
      if (!found.empty()) return found;
    }
  }
  return "";
}

}  // namespace

namespace store_internal {

std::string IllFormedStringIn(const std::string& blob, const Descriptor* type) {
  return FindIllFormed(blob, type, "", 0);
}

}  // namespace store_internal

void Store::set_quarantine_listener(std::function<void(const QuarantinedRow&)> listener) {
  quarantine_listener_ = std::move(listener);
}

absl::StatusOr<QuarantinedRow> Store::MoveToQuarantine(const UnreadableRow& row) {
  if (!IsRowTable(row.table)) {
    return absl::InternalError(absl::StrCat("no table ", row.table, " holds messages"));
  }
  QuarantinedRow out;
  out.table = row.table;
  out.key = EscapeInvalidUtf8(row.key);
  out.reason = row.reason;
  out.time_us = NowMicros();

  absl::StatusOr<Transaction> tx = db_->Begin();
  if (!tx.ok()) return tx.status();
  {
    // Gone already (moved by an earlier read, or replaced): nothing to do.
    absl::StatusOr<ScopedStatement> exists =
        db_->Prepare(absl::StrCat("SELECT 1 FROM ", row.table, " WHERE rowid = ?"));
    if (!exists.ok()) return exists.status();
    (*exists)->BindInt(1, row.rowid);
    absl::StatusOr<bool> found = (*exists)->Step();
    if (!found.ok()) return found.status();
    if (!*found) return absl::NotFoundError("the row is gone already");
  }
  const std::string insert =
      "INSERT INTO quarantine (source, row_key, reason, time_us, proto) VALUES (?, ?, ?, ?, ?)";
  absl::Status s = Run(*db_, insert, [&](Statement& st) {
    st.BindText(1, out.table)
        .BindText(2, out.key)
        .BindText(3, out.reason)
        .BindInt(4, out.time_us)
        .BindBlob(5, row.blob);
  });
  if (!s.ok()) return s;
  out.id = db_->last_insert_rowid();

  // A job's runs and checkpoints go with it (the foreign keys would delete them).
  std::string with;
  if (row.table == "jobs") {
    const std::string why =
        absl::StrCat("its job's row could not be read and was quarantined as id ", out.id);
    std::vector<std::string> moved;
    for (const auto& [what, sql] : std::vector<std::pair<const char*, const char*>>{
             {"run",
              "INSERT INTO quarantine (source, row_key, reason, time_us, proto) SELECT "
              "'runs', job_id || '#' || attempt, ?, ?, proto FROM runs WHERE job_id = ?"},
             {"checkpoint",
              "INSERT INTO quarantine (source, row_key, reason, time_us, proto) SELECT "
              "'checkpoints', CAST(id AS TEXT), ?, ?, proto FROM checkpoints WHERE job_id = ?"}}) {
      s = Run(*db_, sql, [&](Statement& st) {
        st.BindText(1, why).BindInt(2, out.time_us).BindText(3, row.key);
      });
      if (!s.ok()) return s;
      const int n = db_->changes();
      if (n > 0) moved.push_back(absl::StrCat(n, " ", what, n == 1 ? "" : "s"));
    }
    if (!moved.empty()) with = absl::StrCat(", with its ", absl::StrJoin(moved, " and "));
  }
  s = Run(*db_, absl::StrCat("DELETE FROM ", row.table, " WHERE rowid = ?"),
          [&](Statement& st) { st.BindInt(1, row.rowid); });
  if (!s.ok()) return s;

  v1::Event event;
  event.set_type("store.quarantine");
  event.set_job_id(IfUtf8(row.job_id));
  event.set_node_id(IfUtf8(row.node_id));
  *event.mutable_time() = google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(out.time_us);
  event.set_reason(absl::StrCat(row.table, " row ", out.key, " could not be read (", out.reason,
                                ") and was moved to the quarantine table as id ", out.id, with));
  absl::StatusOr<std::vector<v1::Event>> added =
      store_internal::AppendEvents(*db_, {event}, "", "");
  if (!added.ok()) return added.status();
  s = tx->Commit();
  if (!s.ok()) return s;
  return out;
}

bool Store::Quarantine(const std::vector<UnreadableRow>& rows) {
  if (read_only_) return rows.empty();  // skipped; the writing connection moves them
  bool all = true;
  for (const UnreadableRow& row : rows) {
    absl::StatusOr<QuarantinedRow> moved = MoveToQuarantine(row);
    if (moved.ok()) {
      DHP_LOG(ERROR) << "store: " << row.table << " row " << moved->key << " could not be read ("
                     << row.reason << "); moved it to the quarantine table as id " << moved->id
                     << " and serving the rest";
      if (quarantine_listener_) quarantine_listener_(*moved);
    } else if (moved.status().code() != absl::StatusCode::kNotFound) {
      all = false;
      if (unmovable_.emplace(row.table, row.rowid).second) {
        DHP_LOG(ERROR) << "store: " << row.table << " row " << EscapeInvalidUtf8(row.key)
                       << " could not be read (" << row.reason
                       << ") nor moved to the quarantine table (" << moved.status()
                       << "); reads skip it";
      }
    }
  }
  return all;
}

absl::Status Store::NotFound(const char* table, const std::string& key, const std::string& what) {
  absl::StatusOr<ScopedStatement> select = db_->Prepare(
      "SELECT id, reason FROM quarantine WHERE source = ? AND row_key = ? "
      "ORDER BY id DESC LIMIT 1");
  if (select.ok()) {
    (*select)->BindText(1, table).BindText(2, key);
    absl::StatusOr<bool> row = (*select)->Step();
    if (row.ok() && *row) {
      return absl::NotFoundError(absl::StrCat(
          what, " not found: its stored record could not be read (", (*select)->ColumnText(1),
          ") and was moved to the quarantine table as id ", (*select)->ColumnInt(0)));
    }
  }
  return absl::NotFoundError(absl::StrCat(what, " not found"));
}

std::vector<QuarantinedRow> Store::ListQuarantined() {
  std::vector<QuarantinedRow> out;
  absl::StatusOr<ScopedStatement> select =
      db_->Prepare("SELECT id, source, row_key, reason, time_us FROM quarantine ORDER BY id");
  if (!select.ok()) return out;
  while (true) {
    absl::StatusOr<bool> row = (*select)->Step();
    if (!row.ok() || !*row) break;
    Statement& st = **select;
    out.push_back(QuarantinedRow{st.ColumnInt(0), st.ColumnText(1), st.ColumnText(2),
                                 st.ColumnText(3), st.ColumnInt(4)});
  }
  return out;
}

std::map<std::string, int64_t> Store::CountQuarantined() {
  std::map<std::string, int64_t> counts;
  for (const char* table : store_internal::kRowTables) counts[table] = 0;
  absl::StatusOr<ScopedStatement> select =
      db_->Prepare("SELECT source, COUNT(*) FROM quarantine GROUP BY source");
  if (!select.ok()) return counts;
  while (true) {
    absl::StatusOr<bool> row = (*select)->Step();
    if (!row.ok() || !*row) break;
    counts[(*select)->ColumnText(0)] = (*select)->ColumnInt(1);
  }
  return counts;
}

}  // namespace dhp::controller
