#include "controller/wal_checkpointer.h"

#include <sys/stat.h>

#include <algorithm>

#include "common/logging.h"
#include "controller/sqlite_db.h"

namespace dhp::controller {

absl::StatusOr<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Start(
    const std::string& path, std::chrono::milliseconds period,
    std::chrono::milliseconds truncate_every, int64_t truncate_above_bytes) {
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path);
  if (!db.ok()) return db.status();
  return std::unique_ptr<WalCheckpointer>(new WalCheckpointer(
      std::move(*db), path + "-wal", period, truncate_every, truncate_above_bytes));
}

WalCheckpointer::WalCheckpointer(std::unique_ptr<SqliteDb> db, std::string wal_path,
                                 std::chrono::milliseconds period,
                                 std::chrono::milliseconds truncate_every,
                                 int64_t truncate_above_bytes)
    : db_(std::move(db)),
      wal_path_(std::move(wal_path)),
      period_(period),
      truncate_every_(truncate_every),
      truncate_above_bytes_(truncate_above_bytes),
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

int64_t WalCheckpointer::WalFileBytes() const {
  struct stat st;
  return ::stat(wal_path_.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

int WalCheckpointer::truncations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return truncations_;
}

namespace {

// Frames a TRUNCATE may still have to copy after a PASSIVE pass (about 8 MiB of 4 KiB pages):
// a few milliseconds of writing, during which writers wait.
constexpr int64_t kTruncateWhenLeft = 2048;

// One checkpoint of `mode`; the frames of the WAL not yet in the database file.
absl::StatusOr<int64_t> Checkpoint(SqliteDb& db, const char* mode) {
  absl::StatusOr<ScopedStatement> stmt =
      db.Prepare(std::string("PRAGMA wal_checkpoint(") + mode + ")");
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = (*stmt)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return 0;
  // (busy, frames in the WAL, frames checkpointed); -1s when not in WAL mode.
  return std::max<int64_t>(0, (*stmt)->ColumnInt(1) - (*stmt)->ColumnInt(2));
}

}  // namespace

void WalCheckpointer::Run() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point next_truncate = Clock::now() + truncate_every_;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    absl::StatusOr<int64_t> left = Checkpoint(*db_, "PASSIVE");
    if (!left.ok()) DHP_LOG(WARNING) << "WAL checkpoint failed (will retry): " << left.status();
    // TRUNCATE only right after a PASSIVE pass left little to copy: it holds writers while it
    // copies the rest and truncates, so that must be short. Under writes faster than a pass
    // can copy, it waits for a pass that catches up.
    bool truncated = false;
    const bool due = Clock::now() >= next_truncate || WalFileBytes() >= truncate_above_bytes_;
    if (left.ok() && *left <= kTruncateWhenLeft && due) {
      const Clock::time_point start = Clock::now();
      absl::StatusOr<int64_t> done = Checkpoint(*db_, "TRUNCATE");
      const auto took =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      if (!done.ok()) DHP_LOG(WARNING) << "WAL truncation failed (will retry): " << done.status();
      if (took > std::chrono::milliseconds(100)) {
        DHP_LOG(WARNING) << "WAL checkpoint (TRUNCATE) held writers for " << took.count() << " ms";
      }
      truncated = done.ok() && *done == 0;
      if (truncated) next_truncate = Clock::now() + truncate_every_;
    }
    lock.lock();
    ++checkpoints_;
    if (truncated) ++truncations_;
  }
}

}  // namespace dhp::controller
