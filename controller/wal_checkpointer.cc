#include "controller/wal_checkpointer.h"

#include "common/logging.h"
#include "controller/sqlite_db.h"

namespace dhp::controller {

absl::StatusOr<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Start(
    const std::string& path, std::chrono::milliseconds period,
    std::chrono::milliseconds truncate_every) {
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path);
  if (!db.ok()) return db.status();
  return std::unique_ptr<WalCheckpointer>(
      new WalCheckpointer(std::move(*db), period, truncate_every));
}

WalCheckpointer::WalCheckpointer(std::unique_ptr<SqliteDb> db, std::chrono::milliseconds period,
                                 std::chrono::milliseconds truncate_every)
    : db_(std::move(db)),
      period_(period),
      truncate_every_(truncate_every),
      thread_([this] { Run(); }) {}

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

int WalCheckpointer::truncations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return truncations_;
}

void WalCheckpointer::Run() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point next_truncate = Clock::now() + truncate_every_;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    const Clock::time_point start = Clock::now();
    const bool truncate = start >= next_truncate;
    absl::Status s = db_->Exec(truncate ? "PRAGMA wal_checkpoint(TRUNCATE)"
                                        : "PRAGMA wal_checkpoint(PASSIVE)");
    if (!s.ok()) DHP_LOG(WARNING) << "WAL checkpoint failed (will retry): " << s;
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    if (truncate && took > std::chrono::milliseconds(100)) {
      DHP_LOG(WARNING) << "WAL checkpoint (TRUNCATE) held writers for " << took.count() << " ms";
    }
    if (truncate) next_truncate = Clock::now() + truncate_every_;
    lock.lock();
    ++checkpoints_;
    if (truncate && s.ok()) ++truncations_;
  }
}

}  // namespace dhp::controller
