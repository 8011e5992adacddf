// ProgressServer: the agent's gRPC server for its own ranks, on a Unix socket, serving
// WorkerService.ReportProgress into a ProgressRelay (every other method: UNIMPLEMENTED).
//
// The socket is `path`, or progress.sock in a new private directory under /tmp (mkdtemp, mode
// 0700) when `path` is empty; the socket itself is made 0600, so only the agent's user (that of
// its ranks) can report. A socket left at `path` by an agent that died (SIGKILL) is replaced; one
// that a live process listens on is refused, as is a file that is not a socket. The socket (and the directory made for it) is
// removed when the server is destroyed.
//
// Thread-safety: construct and destroy on one thread; the relay is called from gRPC's threads.
#ifndef DHP_WORKER_AGENT_PROGRESS_SERVER_H_
#define DHP_WORKER_AGENT_PROGRESS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/agent/progress_relay.h"

namespace grpc {
class Server;
}

namespace dhp::worker {

// `dir`/progress.sock, the agent's default socket (dir: its log directory, made if missing), so
// that an agent restarted after SIGKILL replaces its predecessor's socket instead of leaving it
// behind. Refused (the agent then uses a private directory) when the path is over 107 bytes or
// `dir` is not this user's alone (another owner, or writable by group or others).
absl::StatusOr<std::string> ProgressSocketIn(const std::string& dir);

class ProgressServer {
 public:
  // Listens on the socket; the error names the path and why not.
  static absl::StatusOr<std::unique_ptr<ProgressServer>> Start(ProgressRelay& relay,
                                                               std::string path);
  ~ProgressServer();
  ProgressServer(const ProgressServer&) = delete;
  ProgressServer& operator=(const ProgressServer&) = delete;

  // "unix:/tmp/dhp-worker-XXXXXX/progress.sock": what ranks get as --progress-via.
  std::string target() const { return "unix:" + path_; }

 private:
  class Service;
  ProgressServer() = default;

  std::string path_;
  std::string made_dir_;  // the directory made for the socket, if any
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace dhp::worker

#endif  // DHP_WORKER_AGENT_PROGRESS_SERVER_H_
