// Store: the rendezvous KV of run attempts while their ranks bootstrap (see store.h and
// controller/rendezvous_kv.h).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "controller/sqlite_db.h"
#include "controller/store.h"

namespace dhp::controller {
namespace {

// Deletes the rows of `table` whose attempt has no run that is still to start or running.
absl::Status DeleteEnded(SqliteDb& db, const std::string& table) {
  DHP_ASSIGN_OR_RETURN(
      ScopedStatement del,
      db.Prepare("DELETE FROM " + table +
                 " WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = " + table +
                 ".job_id AND r.attempt = " + table + ".attempt AND r.state IN (?, ?, ?))"));
  del->BindInt(1, v1::RUN_STATE_PENDING)
      .BindInt(2, v1::RUN_STATE_STARTING)
      .BindInt(3, v1::RUN_STATE_RUNNING);
  return del->Run();
}

}  // namespace

absl::Status Store::WriteKv(const KvWrite& write) {
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  if (write.value.has_value()) {
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement upsert,
        db_->Prepare("INSERT INTO rendezvous_keys (job_id, attempt, key, value) "
                     "VALUES (?, ?, ?, ?) ON CONFLICT (job_id, attempt, key) DO UPDATE SET "
                     "value = excluded.value"));
    upsert->BindText(1, write.job_id)
        .BindInt(2, write.attempt)
        .BindText(3, write.key)
        .BindBlob(4, *write.value);
    DHP_RETURN_IF_ERROR(upsert->Run());
  } else {
    DHP_ASSIGN_OR_RETURN(ScopedStatement del,
                         db_->Prepare("DELETE FROM rendezvous_keys WHERE job_id = ? AND "
                                      "attempt = ? AND key = ?"));
    del->BindText(1, write.job_id).BindInt(2, write.attempt).BindText(3, write.key);
    DHP_RETURN_IF_ERROR(del->Run());
  }
  if (!write.request_id.empty()) {
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement insert,
        db_->Prepare("INSERT INTO rendezvous_replies (job_id, attempt, request_id, reply) "
                     "VALUES (?, ?, ?, ?)"));
    insert->BindText(1, write.job_id)
        .BindInt(2, write.attempt)
        .BindText(3, write.request_id)
        .BindInt(4, write.reply);
    DHP_RETURN_IF_ERROR(insert->Run());
  }
  return tx.Commit();
}

absl::Status Store::DeleteKvScope(const std::string& job_id, int attempt) {
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  for (const char* table : {"rendezvous_keys", "rendezvous_replies"}) {
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement del,
        db_->Prepare(std::string("DELETE FROM ") + table + " WHERE job_id = ? AND attempt = ?"));
    del->BindText(1, job_id).BindInt(2, attempt);
    DHP_RETURN_IF_ERROR(del->Run());
  }
  return tx.Commit();
}

absl::StatusOr<std::vector<StoredKvScope>> Store::LoadKv() {
  {
    DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
    DHP_RETURN_IF_ERROR(DeleteEnded(*db_, "rendezvous_keys"));
    DHP_RETURN_IF_ERROR(DeleteEnded(*db_, "rendezvous_replies"));
    DHP_RETURN_IF_ERROR(tx.Commit());
  }
  std::map<std::pair<std::string, int>, StoredKvScope> scopes;
  auto scope = [&](const Statement& row) -> StoredKvScope& {
    std::pair<std::string, int> id(row.ColumnText(0), static_cast<int>(row.ColumnInt(1)));
    StoredKvScope& s = scopes[id];
    s.job_id = id.first;
    s.attempt = id.second;
    return s;
  };
  {
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement keys,
        db_->Prepare("SELECT job_id, attempt, key, value FROM rendezvous_keys"));
    while (true) {
      DHP_ASSIGN_OR_RETURN(bool row, keys->Step());
      if (!row) break;
      scope(*keys).keys[keys->ColumnText(2)] = keys->ColumnBlob(3);
    }
  }
  {
    DHP_ASSIGN_OR_RETURN(
        ScopedStatement replies,
        db_->Prepare("SELECT job_id, attempt, request_id, reply FROM rendezvous_replies"));
    while (true) {
      DHP_ASSIGN_OR_RETURN(bool row, replies->Step());
      if (!row) break;
      scope(*replies).replies[replies->ColumnText(2)] = replies->ColumnInt(3);
    }
  }
  std::vector<StoredKvScope> out;
  out.reserve(scopes.size());
  for (auto& [id, s] : scopes) out.push_back(std::move(s));
  return out;
}

}  // namespace dhp::controller
