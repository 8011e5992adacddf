// WalCheckpointer: moves SQLite's WAL checkpoints off the controller's loop thread.
//
// By default SQLite checkpoints inside the commit that crosses the WAL size threshold, and that
// commit then waits for an fdatasync of the whole database (measured: 120-250 ms, stalling every
// API call queued behind it). The Store turns automatic checkpoints off on its connection and
// this class checkpoints (PASSIVE: never blocks readers or writers) from its own thread and
// connection every `period`.
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
      const std::string& path, std::chrono::milliseconds period = std::chrono::seconds(1));
  ~WalCheckpointer();

  int checkpoints() const;  // completed checkpoint passes, for tests

 private:
  WalCheckpointer(std::unique_ptr<SqliteDb> db, std::chrono::milliseconds period);
  void Run();

  std::unique_ptr<SqliteDb> db_;  // used only by thread_
  const std::chrono::milliseconds period_;
  mutable std::mutex mu_;  // guards stop_ and checkpoints_
  std::condition_variable cv_;
  bool stop_ = false;
  int checkpoints_ = 0;
  std::thread thread_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_WAL_CHECKPOINTER_H_
