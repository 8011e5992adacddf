// WalCheckpointer: moves SQLite's WAL checkpoints off the controller's loop thread.
//
// By default SQLite checkpoints inside the commit that crosses the WAL size threshold, and that
// commit then waits for an fdatasync of the whole database (measured: 120-250 ms, stalling every
// API call queued behind it). The Store turns automatic checkpoints off on its connection and
// this class checkpoints (PASSIVE: never blocks readers or writers) from its own thread and
// connection every `period`.
//
// A PASSIVE checkpoint leaves the WAL file at its high-water size (SQLite reuses it from the
// start). A TRUNCATE checkpoint follows a PASSIVE pass that left at most ~8 MiB uncopied, every
// `truncate_every` and whenever the WAL file has grown past `truncate_above_bytes`; it empties
// the file, so that disk use follows the live data, and holds writers only while it copies that
// rest and truncates. The Store also sets journal_size_limit, which trims the file whenever a
// writer restarts a fully checkpointed WAL.
//
// Why the size trigger: truncating a file costs time in proportion to its size (measured on
// ext4: ~0.3 s per GB), and whoever truncates holds the writers. A burst of writes (10,000 jobs
// submitted and placed in 20 s) grew the WAL to 1.7 GB before the writes paused; the loop's next
// commit then trimmed it and held every heartbeat and API call for 480 ms. Truncated at 64 MiB,
// no truncation costs more than a few milliseconds.
//
// Thread-safety: owns one thread; the destructor stops and joins it.
#ifndef DHP_CONTROLLER_WAL_CHECKPOINTER_H_
#define DHP_CONTROLLER_WAL_CHECKPOINTER_H_

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace dhp::controller {

class SqliteDb;

class WalCheckpointer {
 public:
  static absl::StatusOr<std::unique_ptr<WalCheckpointer>> Start(
      const std::string& path, std::chrono::milliseconds period = std::chrono::milliseconds(250),
      std::chrono::milliseconds truncate_every = std::chrono::seconds(60),
      int64_t truncate_above_bytes = int64_t{64} << 20);
  ~WalCheckpointer();

  int checkpoints() const;  // completed checkpoint passes, for tests
  int truncations() const;  // of which TRUNCATE

 private:
  WalCheckpointer(std::unique_ptr<SqliteDb> db, std::string wal_path,
                  std::chrono::milliseconds period, std::chrono::milliseconds truncate_every,
                  int64_t truncate_above_bytes);
  void Run();
  int64_t WalFileBytes() const;  // 0 when there is none

  std::unique_ptr<SqliteDb> db_;  // used only by thread_
  const std::string wal_path_;
  const std::chrono::milliseconds period_;
  const std::chrono::milliseconds truncate_every_;
  const int64_t truncate_above_bytes_;
  mutable std::mutex mu_;  // guards stop_, checkpoints_ and truncations_
  std::condition_variable cv_;
  bool stop_ = false;
  int checkpoints_ = 0;
  int truncations_ = 0;
  std::thread thread_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_WAL_CHECKPOINTER_H_
