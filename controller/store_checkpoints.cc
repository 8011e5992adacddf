// Store: checkpoint records (see store.h). Each change is one transaction with its events; the
// records go with their job (DeleteJob, retention).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "controller/sqlite_db.h"
#include "controller/store.h"
#include "controller/store_internal.h"

namespace dhp::controller {

using store_internal::AppendEvents;
using store_internal::CheckStorable;
using store_internal::JobExists;
using store_internal::Micros;
using store_internal::ReadAll;
using store_internal::RowsRead;

absl::StatusOr<v1::Checkpoint> Store::AddCheckpoint(const v1::Checkpoint& ckpt,
                                                    const std::vector<v1::Event>& events) {
  if (ckpt.job_id().empty()) {
    return absl::InvalidArgumentError("checkpoint.job_id is empty; a checkpoint belongs to a job");
  }
  DHP_RETURN_IF_ERROR(CheckStorable(ckpt, absl::StrCat("a checkpoint of job ", ckpt.job_id())));
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_ASSIGN_OR_RETURN(bool exists, JobExists(*db_, ckpt.job_id()));
  if (!exists) {
    return absl::NotFoundError(
        absl::StrCat("job ", ckpt.job_id(), " not found; cannot record a checkpoint for it"));
  }
  v1::Checkpoint stored = ckpt;
  stored.set_id(0);
  DHP_ASSIGN_OR_RETURN(
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
  DHP_RETURN_IF_ERROR(insert->Run());
  stored.set_id(db_->last_insert_rowid());
  DHP_RETURN_IF_ERROR(AppendEvents(*db_, events, stored.job_id(), "").status());
  DHP_RETURN_IF_ERROR(tx.Commit());
  return stored;
}

std::vector<v1::Checkpoint> Store::ListCheckpoints(const std::string& job_id) {
  RowsRead<v1::Checkpoint> read = ReadAll<v1::Checkpoint>(
      *db_, "SELECT id, id, proto, job_id, '' FROM checkpoints WHERE job_id = ? ORDER BY step, id",
      "checkpoints", "ListCheckpoints", &job_id);
  Quarantine(read.unreadable);
  return std::move(read.rows);
}

absl::StatusOr<std::vector<v1::Event>> Store::UpdateCheckpoint(
    const v1::Checkpoint& ckpt, const std::vector<v1::Event>& events) {
  DHP_RETURN_IF_ERROR(CheckStorable(ckpt, absl::StrCat("checkpoint ", ckpt.id())));
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_ASSIGN_OR_RETURN(
      ScopedStatement update,
      db_->Prepare("UPDATE checkpoints SET size_bytes = ?, proto = ? WHERE id = ?"));
  update->BindInt(1, ckpt.size_bytes()).BindBlob(2, ckpt.SerializeAsString()).BindInt(3, ckpt.id());
  DHP_RETURN_IF_ERROR(update->Run());
  if (db_->changes() == 0) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", ckpt.id(), " not found"));
  }
  DHP_ASSIGN_OR_RETURN(std::vector<v1::Event> added, AppendEvents(*db_, events, ckpt.job_id(), ""));
  DHP_RETURN_IF_ERROR(tx.Commit());
  return added;
}

absl::StatusOr<std::vector<v1::Event>> Store::DeleteCheckpoint(
    int64_t id, const std::vector<v1::Event>& events) {
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_ASSIGN_OR_RETURN(ScopedStatement del, db_->Prepare("DELETE FROM checkpoints WHERE id = ?"));
  del->BindInt(1, id);
  DHP_RETURN_IF_ERROR(del->Run());
  if (db_->changes() == 0) return absl::NotFoundError(absl::StrCat("checkpoint ", id, " not found"));
  DHP_ASSIGN_OR_RETURN(std::vector<v1::Event> added, AppendEvents(*db_, events, "", ""));
  DHP_RETURN_IF_ERROR(tx.Commit());
  return added;
}

// ---- events ---------------------------------------------------------------------------------

}  // namespace dhp::controller
