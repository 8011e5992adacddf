// WalCheckpointer: moves SQLite's WAL checkpoints off the controller's loop thread.
//
// By default SQLite checkpoints inside the commit that crosses the WAL size threshold, and that
// commit then waits for an fdatasync of the whole database (measured: 120-250 ms, stalling every
// API call queued behind it). The Store turns automatic checkpoints off on its connection and
// this class checkpoints (PASSIVE: never blocks readers or writers) from its own thread and
// connection every `period`.
//
// A PASSIVE checkpoint leaves the WAL file at its high-water size (SQLite reuses it from the
// start). Every `truncate_every`, once a PASSIVE pass leaves at most ~8 MiB uncopied, a TRUNCATE
// checkpoint follows it and empties the file, so that disk use follows the live data; it holds
// writers only while it copies that rest and truncates. The Store also sets
// journal_size_limit, which trims the file whenever a writer restarts a fully checkpointed WAL.
//
// Thread-safety: owns one thread; the destructor stops and joins it.
#ifndef DHP_CONTROLLER_WAL_CHECKPOINTER_H_
#define DHP_CONTROLLER_WAL_CHECKPOINTER_H_

#include <chrono>
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
      const std::string& path, std::chrono::milliseconds period = std::chrono::seconds(1),
      std::chrono::milliseconds truncate_every = std::chrono::seconds(60));
  ~WalCheckpointer();

  int checkpoints() const;  // completed checkpoint passes, for tests
  int truncations() const;  // of which TRUNCATE

 private:
  WalCheckpointer(std::unique_ptr<SqliteDb> db, std::chrono::milliseconds period,
                  std::chrono::milliseconds truncate_every);
  void Run();

  std::unique_ptr<SqliteDb> db_;  // used only by thread_
  const std::chrono::milliseconds period_;
  const std::chrono::milliseconds truncate_every_;
  mutable std::mutex mu_;  // guards stop_, checkpoints_ and truncations_
  std::condition_variable cv_;
  bool stop_ = false;
  int checkpoints_ = 0;
  int truncations_ = 0;
  std::thread thread_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_WAL_CHECKPOINTER_H_
