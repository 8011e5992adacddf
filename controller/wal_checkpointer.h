// WalCheckpointer: moves SQLite's WAL checkpoints off the controller's loop thread.
//
// By default SQLite checkpoints inside the commit that crosses the WAL size threshold, and that
// commit then waits for an fdatasync of the whole database (measured: 120-250 ms, stalling every
// API call queued behind it). The Store turns automatic checkpoints off on its connection and
// this class checkpoints (PASSIVE: never blocks readers or writers) from its own thread and
// connection every `period`.
//
// Keeping the WAL file small without stalling the writer. A PASSIVE pass copies the frames
// written before it started; under steady writes the writer appends more meanwhile, so the WAL
// is never fully copied, the writer never starts it over, and the file grows. Two steps bound
// it, each holding the writers through the Store's write gate (a mutex every write transaction
// holds; a held writer wakes the moment it is free, where SQLite's busy handler would sleep on
// for up to 100 ms more):
// - Restart: once the WAL holds more than `restart_above_bytes` of frames, passes run back to
//   back until few frames are left to copy, and the last of them runs with writers held, so it
//   copies everything: the next write starts the WAL file over from its beginning. The file
//   keeps its size (its tail is reused), so nothing is freed while writers wait. The hold is one
//   small copy and two fdatasyncs, at most once per `min_restart_interval`: under a flood of
//   writes the WAL then holds what a second of them wrote when it starts over.
// - Truncate: when the file is bigger than `truncate_above_bytes` and a pass finds the WAL fully
//   copied with few frames written since the pass before (writes paused or slowed to a trickle),
//   a TRUNCATE empties it, so that disk use follows the live data. Freeing a file's blocks costs
//   time in proportion to its size (measured on ext4: ~0.85 ms per MiB), which is why it waits
//   for such a moment, and why the file is kept near `restart_above_bytes` (plus what is written
//   in a period and the catch-up passes; under a flood, what a second writes: ~100 MiB at
//   ~100 MB/s of WAL).
// A TRUNCATE must also wait for readers of older snapshots (the /metrics scrape's reader
// connection); it waits at most 50 ms, with the writers held, and otherwise gives up until the
// next quiet pass.
// The Store's own connection never trims the file (journal_size_limit stays off): that trim
// would run inside one of the loop's commits.
//
// Before (a TRUNCATE whenever the file passed 64 MiB, under 1,400 submits/s, ~67 MB/s of WAL):
// every ~1.2 s writers were held 110-250 ms (the final copy, two fdatasyncs, and a 90 ms
// ftruncate of the 64 MiB file) and the loop's busy handler slept up to 50 ms past that.
//
// Thread-safety: owns one thread; the destructor stops and joins it.
#ifndef DHP_CONTROLLER_WAL_CHECKPOINTER_H_
#define DHP_CONTROLLER_WAL_CHECKPOINTER_H_

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace dhp::controller {

class SqliteDb;

struct WalCheckpointerOptions {
  std::chrono::milliseconds period{250};
  // Frames in the WAL. It must stay well under truncate_above_bytes, so that steady writes
  // never grow the file to where it is truncated: a truncation holds the writers while the
  // file's blocks are freed (measured at 10,000 busy nodes, whose WAL often does not start over
  // by itself: a 32 MiB file truncated every 30-60 s, the writers held 65-75 ms each time).
  int64_t restart_above_bytes = int64_t{16} << 20;
  // Under ~100 MB/s of WAL (a flood of submits) a restart every period would hold the writers
  // a quarter of the time; once a second, the WAL holds ~100 MiB when it starts over.
  std::chrono::milliseconds min_restart_interval{1000};
  // Size of the WAL file: what a burst of writes left is given back once they slow down. At
  // 4 MiB it was truncated every ~2 s at 10,000 busy nodes, the writers held ~16 ms each time.
  int64_t truncate_above_bytes = int64_t{32} << 20;
};

class WalCheckpointer {
 public:
  // `gate`: the write gate of the connection that writes (SqliteDb::set_write_gate); null when
  // the writers are elsewhere (the holds then rely on SQLite's busy handler). Must outlive this.
  static absl::StatusOr<std::unique_ptr<WalCheckpointer>> Start(
      const std::string& path, std::mutex* gate, WalCheckpointerOptions options = {});
  ~WalCheckpointer();

  // Called after each hold of the writers with its kind ("restart" or "truncate") and length,
  // on the checkpointer's thread. Thread-safe; once set_hold_observer returns, the previous
  // observer is not running and will not be called again.
  using HoldObserver = std::function<void(const char* kind, double seconds)>;
  void set_hold_observer(HoldObserver observer);

  // For tests and logs:
  int checkpoints() const;  // completed periods
  int restarts() const;     // passes with writers held that left the WAL fully copied
  int truncations() const;  // TRUNCATE checkpoints that emptied the file

 private:
  // What a checkpoint reported: frames in the WAL, and of those not yet copied.
  struct WalState {
    int64_t frames = 0;
    int64_t left = 0;
  };

  WalCheckpointer(std::unique_ptr<SqliteDb> db, std::string wal_path, std::mutex* gate,
                  WalCheckpointerOptions options, int64_t frame_bytes);
  void Run();
  void Pass();  // one period's work
  absl::StatusOr<WalState> Checkpoint(const char* mode);
  // Checkpoint(mode) holding the write gate; logs a long hold or a failure, naming `what`, and
  // reports the hold to the observer as `kind`.
  absl::StatusOr<WalState> CheckpointWithWritersHeld(const char* mode, const char* kind,
                                                     const char* what);
  int64_t WalFileBytes() const;  // 0 when there is none

  std::unique_ptr<SqliteDb> db_;  // used only by thread_
  const std::string wal_path_;
  std::mutex* const gate_;
  const WalCheckpointerOptions options_;
  const int64_t frame_bytes_;   // page size + frame header
  int64_t last_frames_ = 0;     // the previous pass's WalState::frames (thread_ only)
  std::chrono::steady_clock::time_point last_restart_hold_;  // thread_ only
  mutable std::mutex mu_;       // guards stop_ and the counters
  std::condition_variable cv_;
  bool stop_ = false;
  int checkpoints_ = 0;
  int restarts_ = 0;
  int truncations_ = 0;
  std::mutex observer_mu_;  // held while the observer runs
  HoldObserver observer_;
  std::thread thread_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_WAL_CHECKPOINTER_H_
