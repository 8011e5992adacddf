// RankProcess: one child process started and supervised by the agent (a dhp-rank, or anything
// else in tests).
//
// The child runs in its own process group (so signals reach its own children too), with the
// agent's working directory and environment plus `env`, stdin from /dev/null and stdout and
// stderr appended to `log_path` (created with its parent directories). When exec fails, the child
// writes the reason to the log and exits 127.
//
// Supervision never blocks: Poll reaps the child when it has exited (and SIGKILLs whatever is left
// of its process group), and Terminate sends SIGTERM to the group and arms a deadline after which
// Poll sends SIGKILL. The destructor SIGKILLs the group and reaps the child, so a RankProcess
// never leaves a zombie or an orphaned group behind. Should the agent itself die, the kernel
// SIGKILLs the child (PR_SET_PDEATHSIG; the thread that called Start must outlive the child).
//
// Thread-compatible: one thread at a time (the agent keeps its RankProcesses on its loop thread).
#ifndef DHP_WORKER_AGENT_RANK_PROCESS_H_
#define DHP_WORKER_AGENT_RANK_PROCESS_H_

#include <sys/types.h>

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace dhp::worker {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the agent's environment
  std::string log_path;
};

class RankProcess {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;

  // Opens the log and forks. Errors: an empty argv, a log that cannot be created, fork failure.
  // A binary that cannot be executed is not an error here: the child exits 127 and says why in
  // its log.
  static absl::StatusOr<std::unique_ptr<RankProcess>> Start(const ProcessSpec& spec);

  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  // Reaps the child if it has exited; sends the SIGKILL of a Terminate whose grace has run out.
  // Returns true once the child has exited. Never blocks.
  bool Poll();

  // `signal` (SIGTERM: dhp-rank checkpoints at its next step boundary and exits; SIGINT: it
  // ends at once) to the process group now, SIGKILL from the first Poll after `grace`. A second
  // call sends nothing and never postpones the SIGKILL. No-op once the child has exited.
  void Terminate(std::chrono::milliseconds grace, int signal = SIGTERM);
  // SIGKILL to the process group now.
  void Kill();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  bool exited() const { return exited_; }
  bool terminating() const { return terminating_; }
  // Valid once exited(): the exit status, or -1 when a signal ended it (then signal() is set).
  int exit_code() const { return exit_code_; }
  int signal() const { return signal_; }
  // Once exited with a non-zero status or a signal: the last lines of the log (see LogTail).
  const std::string& log_tail() const { return log_tail_; }

 private:
  RankProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  void Reaped(int wait_status);

  const pid_t pid_;
  const std::string log_path_;
  bool exited_ = false;
  bool terminating_ = false;
  bool killed_ = false;
  SteadyTime kill_at_{};
  int exit_code_ = 0;
  int signal_ = 0;
  std::string log_tail_;
};

// The last `max_lines` lines of the file, at most `max_bytes` bytes (a line cut by that limit is
// dropped unless it is the only one). Empty when the file cannot be read.
std::string LogTail(const std::string& path, int max_lines = 20, int max_bytes = 2048);

}  // namespace dhp::worker

#endif  // DHP_WORKER_AGENT_RANK_PROCESS_H_
