// Store: nodes (see store.h). A node's row is its whole message; node events are appended in
// the same transaction as the change that caused them.
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
using store_internal::Micros;
using store_internal::ReadAll;
using store_internal::ReadRows;
using store_internal::RowsRead;
using store_internal::UnreadableRow;

namespace {

absl::Status UpsertNode(SqliteDb& db, const v1::Node& node) {
  if (node.id().empty()) return absl::InvalidArgumentError("node.id is empty; every node needs an id");
  DHP_RETURN_IF_ERROR(CheckStorable(node, absl::StrCat("node ", node.id())));
  DHP_ASSIGN_OR_RETURN(
      ScopedStatement upsert,
      db.Prepare("INSERT INTO nodes (id, hostname, state, last_heartbeat_us, proto) "
                 "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                 "hostname = excluded.hostname, state = excluded.state, "
                 "last_heartbeat_us = excluded.last_heartbeat_us, proto = excluded.proto"));
  upsert->BindText(1, node.id())
      .BindText(2, node.hostname())
      .BindInt(3, node.state())
      .BindInt(4, Micros(node.last_heartbeat_time()))
      .BindBlob(5, node.SerializeAsString());
  return upsert->Run();
}

}  // namespace

absl::StatusOr<std::vector<v1::Event>> Store::PutNode(const v1::Node& node,
                                                      const std::vector<v1::Event>& events) {
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  DHP_RETURN_IF_ERROR(UpsertNode(*db_, node));
  DHP_ASSIGN_OR_RETURN(std::vector<v1::Event> out, AppendEvents(*db_, events, "", node.id()));
  DHP_RETURN_IF_ERROR(tx.Commit());
  return out;
}

absl::Status Store::PutNodes(const std::vector<v1::Node>& nodes) {
  if (nodes.empty()) return absl::OkStatus();
  DHP_ASSIGN_OR_RETURN(Transaction tx, db_->Begin());
  for (const v1::Node& node : nodes) DHP_RETURN_IF_ERROR(UpsertNode(*db_, node));
  return tx.Commit();
}

absl::StatusOr<v1::Node> Store::GetNode(const std::string& node_id) {
  std::vector<UnreadableRow> unreadable;
  {
    DHP_ASSIGN_OR_RETURN(ScopedStatement select,
                         db_->Prepare("SELECT rowid, id, proto, '', id FROM nodes WHERE id = ?"));
    select->BindText(1, node_id);
    DHP_ASSIGN_OR_RETURN(RowsRead<v1::Node> read, ReadRows<v1::Node>(*select, "nodes"));
    if (!read.rows.empty()) return std::move(read.rows[0]);
    unreadable = std::move(read.unreadable);
  }
  if (!Quarantine(unreadable)) {
    return absl::DataLossError(absl::StrCat("node ", node_id, " cannot be read: ",
                                            unreadable[0].reason, " (see the controller's log)"));
  }
  return NotFound("nodes", node_id, absl::StrCat("node ", node_id));
}

std::vector<v1::Node> Store::ListNodes() {
  RowsRead<v1::Node> read = ReadAll<v1::Node>(
      *db_, "SELECT rowid, id, proto, '', id FROM nodes ORDER BY id", "nodes", "ListNodes");
  Quarantine(read.unreadable);
  return std::move(read.rows);
}

}  // namespace dhp::controller
