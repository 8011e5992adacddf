#include "controller/wal_checkpointer.h"

#include "common/logging.h"
#include "controller/sqlite_db.h"

namespace dhp::controller {

absl::StatusOr<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Start(
    const std::string& path, std::chrono::milliseconds period) {
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path);
  if (!db.ok()) return db.status();
  return std::unique_ptr<WalCheckpointer>(new WalCheckpointer(std::move(*db), period));
}

WalCheckpointer::WalCheckpointer(std::unique_ptr<SqliteDb> db, std::chrono::milliseconds period)
    : db_(std::move(db)), period_(period), thread_([this] { Run(); }) {}

WalCheckpointer::~WalCheckpointer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int WalCheckpointer::checkpoints() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checkpoints_;
}

void WalCheckpointer::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    absl::Status s = db_->Exec("PRAGMA wal_checkpoint(PASSIVE)");
    if (!s.ok()) DHP_LOG(WARNING) << "WAL checkpoint failed (will retry): " << s;
    lock.lock();
    ++checkpoints_;
  }
}

}  // namespace dhp::controller
