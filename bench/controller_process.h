// ControllerProcess: a real dhp-controller child process for benchmarks, on loopback, with a
// fresh temporary --data-dir, kernel-chosen ports (read back from --port-file) and its log in
// <temp dir>/controller.log. StartRelay runs a dhp-relay the same way.
//
// The destructor stops the process (SIGTERM, then SIGKILL after a grace period) and removes
// the temporary directory unless keep_temp_dir() was asked for. Not thread-safe.
#ifndef DHP_BENCH_CONTROLLER_PROCESS_H_
#define DHP_BENCH_CONTROLLER_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dhp::bench {

class ControllerProcess {
 public:
  // Spawns `binary` with --data-dir, --grpc-port 0, --http-port 0, --port-file and
  // `extra_args`, then waits up to `ready_timeout` for the port file. FAILED_PRECONDITION
  // (with the log's tail) when the process exits or never writes it.
  static absl::StatusOr<std::unique_ptr<ControllerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& extra_args = {},
      std::chrono::milliseconds ready_timeout = std::chrono::seconds(30));
  // The same for a dhp-relay forwarding to `controller` (host:port): --listen 127.0.0.1:0,
  // --port-file and `extra_args`; http_port() is 0.
  static absl::StatusOr<std::unique_ptr<ControllerProcess>> StartRelay(
      const std::string& binary, const std::string& controller,
      const std::vector<std::string>& extra_args = {},
      std::chrono::milliseconds ready_timeout = std::chrono::seconds(30));
  ~ControllerProcess();
  ControllerProcess(const ControllerProcess&) = delete;
  ControllerProcess& operator=(const ControllerProcess&) = delete;

  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  const std::string& temp_dir() const { return temp_dir_; }
  std::string log_path() const { return temp_dir_ + "/controller.log"; }
  void keep_temp_dir() { keep_ = true; }

  // User + system CPU seconds the process has used so far (from /proc/<pid>/stat); -1 if
  // unreadable.
  double CpuSeconds() const;
  // Threads of the process right now (from /proc/<pid>/status); -1 if unreadable.
  int ThreadCount() const;
  // Per live thread, by thread id (from /proc/<pid>/task/<tid>/schedstat): seconds on a CPU
  // and seconds runnable but waiting for one (-1 where the kernel lacks schedstats; then
  // cpu_s comes from .../stat at clock-tick resolution).
  // Also its voluntary + involuntary context switches (.../status).
  struct ThreadTimes {
    double cpu_s = 0;
    double runqueue_wait_s = -1;
    int64_t context_switches = 0;
  };
  std::map<pid_t, ThreadTimes> ThreadCpuTimes() const;

  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status as a phrase
  // ("exit 0", "signal 9"). Idempotent.
  std::string Stop(std::chrono::milliseconds grace = std::chrono::seconds(10));

 private:
  ControllerProcess() = default;
  static absl::StatusOr<std::unique_ptr<ControllerProcess>> Spawn(
      const std::string& binary, const std::vector<std::string>& extra_args,
      std::chrono::milliseconds ready_timeout, bool relay);

  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int http_port_ = 0;
  std::string temp_dir_;
  bool keep_ = false;
  std::string exit_;
};

// The last `max_bytes` of a file (for error messages); empty if unreadable.
std::string FileTail(const std::string& path, size_t max_bytes = 2000);

}  // namespace dhp::bench

#endif  // DHP_BENCH_CONTROLLER_PROCESS_H_
