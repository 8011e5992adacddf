// Store: ExportCheckpoint's records (see store.h and controller/export_manager.h).
//
// A stored export whose message does not parse is skipped by the lists and is DATA_LOSS for
// GetExport (not quarantined: an export record holds nothing another row depends on).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/proto_utf8.h"
#include "common/utf8.h"
#include "common/status_macros.h"
#include "controller/sqlite_db.h"
#include "controller/store.h"
#include "controller/store_internal.h"

namespace dhp::controller {
namespace {

// The exports `select` returns (its column 0: the proto), skipping unreadable rows.
absl::StatusOr<std::vector<v1::Export>> ReadExports(Statement& select) {
  std::vector<v1::Export> out;
  while (true) {
    DHP_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return out;
    absl::StatusOr<v1::Export> e = store_internal::ParseRow<v1::Export>(select.ColumnBlob(0));
    if (!e.ok()) {
      DHP_LOG(WARNING) << "skipping an unreadable export row: " << e.status();
      continue;
    }
    out.push_back(*std::move(e));
  }
}

}  // namespace

absl::Status Store::PutExport(const v1::Export& e) {
  if (e.id().empty() || e.job_id().empty()) {
    return absl::InvalidArgumentError("an export needs an id and a job_id");
  }
  if (const std::string bad = InvalidUtf8Field(e); !bad.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("refusing to store export ", e.id(), ": ", bad, " is not UTF-8"));
  }
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_ASSIGN_OR_RETURN(ScopedStatement exists,
                       db_->Prepare("SELECT 1 FROM jobs WHERE id = ?"));
  exists->BindText(1, e.job_id());
  DHP_ASSIGN_OR_RETURN(bool found, exists->Step());
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("job ", e.job_id(), " not found; cannot record an export of it"));
  }
  DHP_ASSIGN_OR_RETURN(
      ScopedStatement upsert,
      db_->Prepare("INSERT INTO exports (id, job_id, state, proto) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT (id) DO UPDATE SET state = excluded.state, "
                   "proto = excluded.proto"));
  upsert->BindText(1, e.id())
      .BindText(2, e.job_id())
      .BindInt(3, e.state())
      .BindBlob(4, e.SerializeAsString());
  DHP_RETURN_IF_ERROR(upsert->Run());
  return tx.Commit();
}

absl::StatusOr<v1::Export> Store::GetExport(const std::string& id) {
  DHP_ASSIGN_OR_RETURN(ScopedStatement select,
                       db_->Prepare("SELECT proto FROM exports WHERE id = ?"));
  select->BindText(1, id);
  DHP_ASSIGN_OR_RETURN(bool row, select->Step());
  if (!row) {
    return absl::NotFoundError(
        absl::StrCat("export ", EscapeInvalidUtf8(id), " not found (dhpctl export JOB --on-controller "
                                                       "prints the ids of exports)"));
  }
  return store_internal::ParseRow<v1::Export>(select->ColumnBlob(0));
}

absl::StatusOr<std::vector<v1::Export>> Store::ListExports(const std::string& job_id) {
  DHP_ASSIGN_OR_RETURN(
      ScopedStatement select,
      db_->Prepare("SELECT proto FROM exports WHERE job_id = ? ORDER BY seq DESC"));
  select->BindText(1, job_id);
  return ReadExports(*select);
}

absl::StatusOr<std::vector<v1::Export>> Store::ListExportsInStates(
    const std::vector<v1::ExportState>& states) {
  std::vector<v1::Export> out;
  for (v1::ExportState state : states) {
    DHP_ASSIGN_OR_RETURN(ScopedStatement select,
                         db_->Prepare("SELECT proto FROM exports WHERE state = ? ORDER BY seq"));
    select->BindInt(1, state);
    DHP_ASSIGN_OR_RETURN(std::vector<v1::Export> some, ReadExports(*select));
    out.insert(out.end(), some.begin(), some.end());
  }
  return out;
}

}  // namespace dhp::controller
