// ExportManager: ExportCheckpoint, GetExport and ListExports. The controller writes a job's
// checkpoint as a Hugging Face model directory into <root>/<export id> by running
// `dhp-ckpt export CHECKPOINT_DIR --hf-dir OUT --dtype D` as a child process.
//
// Why the controller runs it: the export must run where the checkpoint lives, and the
// controller already reads and writes the checkpoint root (manifest.json, deleting old
// checkpoints). dhp-ckpt links LibTorch and the controller must not, hence a child process.
//
// Each export is a row of the store (PENDING -> RUNNING -> SUCCEEDED | FAILED), so GetExport
// answers after a restart; exports that were PENDING or RUNNING when the controller stopped
// are FAILED by Recover ("controller restarted during the export"). At most max_concurrent
// children run at once; the others wait PENDING, oldest first. A child is spawned, its output
// (stdout and stderr, the last message_bytes kept) read and its exit awaited on a thread of
// its own; the result is posted to the loop. Ids are made here ("x-" and 12 hex digits), never
// taken from a request, so the output path cannot leave the root.
//
// Thread-safety: Recover, Create, Get and List run on the controller's loop thread only (as
// the Store); Stop from any thread once the loop no longer runs.
#ifndef DHP_CONTROLLER_EXPORT_MANAGER_H_
#define DHP_CONTROLLER_EXPORT_MANAGER_H_

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "controller/store.h"
#include "dhp/v1/service.pb.h"

namespace dhp::controller {

struct ExportOptions {
  std::string root;            // exports go to <root>/<id>; absolute
  std::string dhp_ckpt;        // the executable; empty: ExportCheckpoint is FAILED_PRECONDITION
  std::string dhp_ckpt_error;  // why dhp_ckpt is empty, for that message
  std::string data_root;       // dhp-ckpt's --data-root when not empty
  int max_concurrent = 1;
  size_t message_bytes = 4096;  // of the child's output kept in a FAILED export's message
};

// Where dhp-ckpt is: `given` when not empty (it must be an executable file), else
// `self_dir`/dhp-ckpt, else the first dhp-ckpt on the colon-separated `path_env`. NOT_FOUND
// names where it looked and the setting that fixes it (export.dhp_ckpt).
absl::StatusOr<std::string> FindExportTool(const std::string& given, const std::string& self_dir,
                                           const std::string& path_env);

// The arguments alone (no state): INVALID_ARGUMENT naming the field.
absl::Status CheckExportRequest(const v1::ExportCheckpointRequest& req);

class ExportManager {
 public:
  // `post` queues a closure on the loop thread. `store` and `clock` must outlive this.
  ExportManager(Store& store, const Clock& clock, ExportOptions options,
                std::function<void(std::function<void()>)> post);
  ~ExportManager();
  ExportManager(const ExportManager&) = delete;
  ExportManager& operator=(const ExportManager&) = delete;

  // Loop thread, at start: exports left PENDING or RUNNING by a previous controller -> FAILED.
  absl::Status Recover();

  absl::Status Create(const v1::ExportCheckpointRequest& req, v1::ExportCheckpointResponse* resp);
  absl::Status Get(const v1::GetExportRequest& req, v1::GetExportResponse* resp);
  absl::Status List(const v1::ListExportsRequest& req, v1::ListExportsResponse* resp);

  // Kills the running children (SIGTERM to their process groups) and joins their threads,
  // posting nothing; their records stay RUNNING (Recover fails them at the next start). Call
  // after the loop has stopped. Idempotent.
  void Stop();

 private:
  struct Runner {
    std::thread thread;
    pid_t pid = 0;  // guarded by mu_; 0 until spawned and once reaped
  };
  void StartPending();  // loop: start PENDING exports while slots are free
  void Run(const std::string& id, std::vector<std::string> argv);  // the runner thread
  // Loop: the child has ended, `ok` when it exited 0. `message`: its output's tail (after
  // how it ended), or why it could not start.
  void Finish(const std::string& id, bool ok, const std::string& message);
  void Fail(v1::Export e, const std::string& message);  // loop: store it FAILED

  Store& store_;
  const Clock& clock_;
  const ExportOptions options_;
  const std::function<void(std::function<void()>)> post_;
  std::deque<std::string> pending_;  // loop thread: ids waiting for a slot, oldest first

  std::mutex mu_;  // guards runners_ (and each Runner's pid) and stopping_
  std::map<std::string, std::unique_ptr<Runner>> runners_;  // by export id
  bool stopping_ = false;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_EXPORT_MANAGER_H_
