#include "worker/agent/progress_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/grpc_status.h"
#include "dhp/v1/service.grpc.pb.h"

namespace dhp::worker {
namespace {

// sockaddr_un.sun_path holds 108 bytes, the terminating NUL included.
constexpr size_t kMaxSocketPath = 107;

std::string Errno(const std::string& what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

absl::Status CheckLength(const std::string& path) {
  if (path.size() <= kMaxSocketPath) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("progress socket \"", path, "\": ", path.size(),
                                                 " bytes; a Unix socket's path holds at most ",
                                                 kMaxSocketPath));
}

// True when a process accepts connections on the Unix socket at `path` (an agent that is alive).
bool SomeoneListens(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);  // CheckLength: it fits
  const bool listens = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return listens;
}

// Removes a socket left at `path` by an agent that died (SIGKILL); refuses one still listened
// on, and anything that is not a socket.
absl::Status RemoveStale(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(Errno("progress socket \"" + path + "\""));
  }
  if (!S_ISSOCK(st.st_mode)) {  // never delete what is not a socket (a mistyped path)
    return absl::FailedPreconditionError(
        absl::StrCat("progress socket \"", path, "\": something other than a socket is there"));
  }
  if (SomeoneListens(path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "progress socket \"", path, "\": another process (an agent with the same log "
        "directory?) listens on it"));
  }
  if (unlink(path.c_str()) != 0) {
    return absl::FailedPreconditionError(Errno("progress socket \"" + path + "\""));
  }
  return absl::OkStatus();
}

}  // namespace

class ProgressServer::Service final : public v1::WorkerService::Service {
 public:
  explicit Service(ProgressRelay& relay) : relay_(relay) {}

  grpc::Status ReportProgress(grpc::ServerContext*, const v1::ReportProgressRequest* req,
                              v1::ReportProgressResponse* resp) override {
    absl::StatusOr<v1::ReportProgressResponse> answer = relay_.Accept(*req);
    if (!answer.ok()) return api::ToGrpcStatus(answer.status());
    *resp = std::move(*answer);
    return grpc::Status::OK;
  }

 private:
  ProgressRelay& relay_;
};

absl::StatusOr<std::unique_ptr<ProgressServer>> ProgressServer::Start(ProgressRelay& relay,
                                                                      std::string path) {
  std::unique_ptr<ProgressServer> server(new ProgressServer());
  if (path.empty()) {
    std::string dir = "/tmp/dhp-worker-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) {
      return absl::InternalError(Errno("progress socket: cannot make a directory in /tmp"));
    }
    server->made_dir_ = dir;
    path = server->made_dir_ + "/progress.sock";
  }
  if (absl::Status s = CheckLength(path); !s.ok()) return s;
  if (absl::Status s = RemoveStale(path); !s.ok()) return s;
  server->path_ = path;  // from here on, the destructor removes it
  server->service_ = std::make_unique<Service>(relay);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(server->target(), grpc::InsecureServerCredentials());
  builder.RegisterService(server->service_.get());
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("progress socket \"", path, "\": gRPC could not listen there"));
  }
  if (chmod(path.c_str(), 0600) != 0) {
    return absl::InternalError(Errno("progress socket \"" + path + "\": chmod 0600"));
  }
  return server;
}

absl::StatusOr<std::string> ProgressSocketIn(const std::string& dir) {
  const std::string path = dir + "/progress.sock";
  if (absl::Status s = CheckLength(path); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return absl::FailedPreconditionError(Errno("\"" + dir + "\""));
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "\"%s\" is not this user's alone (owner uid %d, mode %o): another user could take over "
        "the ranks' socket", dir, st.st_uid, st.st_mode & 07777));
  }
  return path;
}

ProgressServer::~ProgressServer() {
  if (server_ != nullptr) server_->Shutdown();
  if (!path_.empty()) unlink(path_.c_str());
  if (!made_dir_.empty()) rmdir(made_dir_.c_str());
}

}  // namespace dhp::worker
