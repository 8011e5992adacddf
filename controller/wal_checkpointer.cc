#include "controller/wal_checkpointer.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "controller/sqlite_db.h"

namespace dhp::controller {

namespace {

// Before the pass with writers held, unheld passes run back to back (at most kCatchUpPasses)
// until at most kCatchUpTo frames (~2 MiB of 4 KiB pages) are left for it to copy. Each pass
// takes about one fdatasync, so under heavy writes (~17,000 frames/s measured) they level off
// near that; the held pass then runs if at most kHoldWhenLeft (~8 MiB) are left, or else the
// next period tries again.
constexpr int64_t kCatchUpTo = 512;
constexpr int kCatchUpPasses = 4;
constexpr int64_t kHoldWhenLeft = 2048;
// Writes slow enough for the WAL file to be truncated, in frames per period (~4 MiB: 16 MB/s at
// the default 250 ms). The hold then copies little, and the truncation (~0.85 ms per MiB of
// file freed) happens once after a burst, not over and over under one.
constexpr int64_t kQuietFrames = 1024;
// A hold longer than this is logged.
constexpr std::chrono::milliseconds kSlowHold(100);
constexpr int64_t kWalFrameHeaderBytes = 24;
// How long a TRUNCATE waits for readers of older snapshots (e.g. a /metrics scrape on the
// reader connection) while it holds the writers; past it, the next quiet pass tries again.
constexpr int kBusyTimeoutMs = 50;

using Clock = std::chrono::steady_clock;

}  // namespace

absl::StatusOr<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Start(
    const std::string& path, std::mutex* gate, WalCheckpointerOptions options) {
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path, kBusyTimeoutMs);
  if (!db.ok()) return db.status();
  absl::StatusOr<int64_t> page = (*db)->QueryInt("PRAGMA page_size");
  if (!page.ok()) return page.status();
  return std::unique_ptr<WalCheckpointer>(new WalCheckpointer(
      std::move(*db), path + "-wal", gate, options, *page + kWalFrameHeaderBytes));
}

WalCheckpointer::WalCheckpointer(std::unique_ptr<SqliteDb> db, std::string wal_path,
                                 std::mutex* gate, WalCheckpointerOptions options,
                                 int64_t frame_bytes)
    : db_(std::move(db)),
      wal_path_(std::move(wal_path)),
      gate_(gate),
      options_(options),
      frame_bytes_(frame_bytes),
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

void WalCheckpointer::set_hold_observer(HoldObserver observer) {
  std::lock_guard<std::mutex> lock(observer_mu_);
  observer_ = std::move(observer);
}

int WalCheckpointer::restarts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return restarts_;
}

int WalCheckpointer::truncations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return truncations_;
}

int64_t WalCheckpointer::WalFileBytes() const {
  struct stat st;
  return ::stat(wal_path_.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

absl::StatusOr<WalCheckpointer::WalState> WalCheckpointer::Checkpoint(const char* mode) {
  absl::StatusOr<ScopedStatement> stmt =
      db_->Prepare(std::string("PRAGMA wal_checkpoint(") + mode + ")");
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = (*stmt)->Step();
  if (!row.ok()) return row.status();
  if (!*row) return WalState{};
  // (busy, frames in the WAL, frames checkpointed); -1s when not in WAL mode.
  WalState state;
  state.frames = std::max<int64_t>(0, (*stmt)->ColumnInt(1));
  state.left = std::max<int64_t>(0, state.frames - (*stmt)->ColumnInt(2));
  return state;
}

void WalCheckpointer::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, options_.period, [this] { return stop_; })) {
    lock.unlock();
    Pass();
    lock.lock();
    ++checkpoints_;
  }
}

void WalCheckpointer::Pass() {
  absl::StatusOr<WalState> state = Checkpoint("PASSIVE");
  if (!state.ok()) {
    DHP_LOG(WARNING) << "WAL checkpoint failed (will retry): " << state.status();
    return;
  }
  // Frames written since the previous pass (after a restart: those since the restart).
  const int64_t appended =
      state->frames >= last_frames_ ? state->frames - last_frames_ : state->frames;
  last_frames_ = state->frames;
  const bool quiet = state->left == 0 && appended <= kQuietFrames;
  if (quiet && WalFileBytes() > options_.truncate_above_bytes) {  // give the space back
    state = CheckpointWithWritersHeld("TRUNCATE", "truncate", "TRUNCATE");
    if (state.ok() && state->frames == 0) {
      last_frames_ = 0;
      std::lock_guard<std::mutex> lock(mu_);
      ++truncations_;
    }
    return;
  }
  if (state->frames * frame_bytes_ <= options_.restart_above_bytes) return;
  if (Clock::now() - last_restart_hold_ < options_.min_restart_interval) return;
  for (int i = 0; i < kCatchUpPasses && state.ok() && state->left > kCatchUpTo; ++i) {
    state = Checkpoint("PASSIVE");
  }
  if (!state.ok() || state->left > kHoldWhenLeft) return;  // the next period tries again
  last_restart_hold_ = Clock::now();
  state = CheckpointWithWritersHeld("PASSIVE", "restart",
                                    "the last copy before the WAL starts over");
  if (state.ok() && state->left == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    ++restarts_;
  }
}

absl::StatusOr<WalCheckpointer::WalState> WalCheckpointer::CheckpointWithWritersHeld(
    const char* mode, const char* kind, const char* what) {
  const Clock::time_point start = Clock::now();
  std::unique_lock<std::mutex> held;
  if (gate_ != nullptr) held = std::unique_lock<std::mutex>(*gate_);
  absl::StatusOr<WalState> state = Checkpoint(mode);
  if (held.owns_lock()) held.unlock();
  const std::chrono::duration<double> took = Clock::now() - start;
  if (took > kSlowHold) {
    DHP_LOG(WARNING) << "WAL checkpoint (" << what << ") held writers for "
                     << static_cast<int>(took.count() * 1000) << " ms";
  }
  {
    std::lock_guard<std::mutex> lock(observer_mu_);
    if (observer_) observer_(kind, took.count());
  }
  if (!state.ok()) DHP_LOG(WARNING) << "WAL checkpoint (" << what << ") failed: " << state.status();
  return state;
}

}  // namespace dhp::controller
