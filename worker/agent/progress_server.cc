#include "worker/agent/progress_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "api/grpc_status.h"
#include "dhp/v1/service.grpc.pb.h"

namespace dhp::worker {
namespace {

// sockaddr_un.sun_path holds 108 bytes, the terminating NUL included.
constexpr size_t kMaxSocketPath = 107;

std::string Errno(const std::string& what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
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
  server->path_ = path;
  if (path.size() > kMaxSocketPath) {
    return absl::InvalidArgumentError(absl::StrCat("progress socket \"", path, "\": ",
                                                   path.size(), " bytes; a Unix socket's path "
                                                   "holds at most ", kMaxSocketPath));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {  // left by an agent that died
    return absl::FailedPreconditionError(Errno("progress socket \"" + path + "\""));
  }
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

ProgressServer::~ProgressServer() {
  if (server_ != nullptr) server_->Shutdown();
  if (!path_.empty()) unlink(path_.c_str());
  if (!made_dir_.empty()) rmdir(made_dir_.c_str());
}

}  // namespace dhp::worker
