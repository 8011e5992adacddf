// dhp-controller: the control-plane daemon. Serves gRPC and REST on loopback by default,
// keeps its state in SQLite under --data-dir, and stops cleanly on SIGINT/SIGTERM.
// Settings come from flags and/or --config FILE (controller/config.h); exit status 2 when they
// are invalid, 1 when starting fails.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/command_line.h"
#include "api/auth.h"
#include "api/grpc_server.h"
#include "api/instrumented_service.h"
#include "api/rest_gateway.h"
#include "common/clock.h"
#include "common/lock_file.h"
#include "common/logging.h"
#include "common/mutex_mode.h"
#include "common/proto_log.h"
#include "common/metrics_exposition.h"
#include "common/proto_yaml.h"
#include "controller/config.h"
#include "controller/controller.h"
#include "controller/export_manager.h"
#include "controller/store.h"

namespace {

bool WritePortFile(const std::string& path, int grpc_port, int http_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"grpc_port\": " << grpc_port << ", \"http_port\": " << http_port << "}\n";
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// The directory of this executable (/proc/self/exe), or "" when unknown.
std::string SelfDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

int Fail(const std::string& message) {
  DHP_LOG(ERROR) << message;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  dhp::RouteProtobufLogs();  // a client's bad bytes cannot fill the log
  dhp::SkipMutexOrderChecks();  // Debian's Abseil checks lock order on every lock
  CLI::App app{"dhp-controller: the dhp control plane"};
  dhp::controller::ControllerCommandLine command_line;
  dhp::controller::AddControllerFlags(app, &command_line);
  if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;
  absl::StatusOr<dhp::v1::ControllerConfig> resolved =
      dhp::controller::ResolveControllerConfig(command_line);
  if (!resolved.ok()) {
    DHP_LOG(ERROR) << "invalid configuration: " << resolved.status().message();
    return 2;
  }
  if (command_line.check_config) {
    std::cout << dhp::ProtoToYaml(*resolved);
    return 0;
  }
  const dhp::v1::ControllerConfig& config = *resolved;
  const std::string& bind = config.listen().bind();
  const std::string& db = config.db();
  const std::string& checkpoint_root = config.checkpoint_root();

  // Handle SIGINT/SIGTERM synchronously in main; every thread started below inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::error_code ec;
  std::filesystem::create_directories(config.data_dir(), ec);
  std::filesystem::create_directories(std::filesystem::path(db).parent_path(), ec);
  std::filesystem::create_directories(checkpoint_root, ec);
  if (ec) return Fail("cannot create " + checkpoint_root + ": " + ec.message());
  // One controller per data directory, and per database when it lives elsewhere.
  std::vector<dhp::LockFile> locks;
  for (const std::string& path :
       {config.data_dir() + "/dhp-controller.lock", db + ".controller.lock"}) {
    absl::StatusOr<dhp::LockFile> lock = dhp::LockFile::Acquire(path);
    if (!lock.ok()) return Fail(std::string(lock.status().message()));
    locks.push_back(*std::move(lock));
  }

  absl::StatusOr<std::unique_ptr<dhp::controller::Store>> store =
      dhp::controller::Store::Open(db);
  if (!store.ok()) return Fail("cannot open the database " + db + ": " +
                               std::string(store.status().message()));
  // The /metrics scrape reads job rows here, off the loop.
  absl::StatusOr<std::unique_ptr<dhp::controller::Store>> reader =
      dhp::controller::Store::OpenReader(db);
  if (!reader.ok()) return Fail("cannot open a reader on the database " + db + ": " +
                                std::string(reader.status().message()));

  absl::StatusOr<dhp::api::TokenAuth> authenticated = dhp::controller::AuthFromConfig(config);
  if (!authenticated.ok()) return Fail(std::string(authenticated.status().message()));
  const dhp::api::TokenAuth auth = *std::move(authenticated);
  if (!auth.enabled() && bind != "127.0.0.1" && bind != "localhost" && bind != "::1") {
    DHP_LOG(WARNING) << "listening on " << bind << " without --auth-token-file "
                     << "(auth.token_file): anyone who can reach this host can submit and "
                     << "cancel jobs";
  }

  absl::StatusOr<dhp::api::TlsPems> tls = dhp::api::LoadTls(dhp::controller::TlsFiles(config));
  if (!tls.ok()) return Fail(std::string(tls.status().message()));
  std::shared_ptr<boost::asio::ssl::context> https;
  if (!tls->cert.empty()) {
    absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> context =
        dhp::api::MakeHttpTlsContext(*tls);
    if (!context.ok()) return Fail("listen.tls: " + std::string(context.status().message()));
    https = *std::move(context);
  }

  dhp::SystemClock clock;
  dhp::MetricsExposition metrics;
  dhp::controller::ControllerOptions options;
  options.spec.checkpoint_root = std::filesystem::absolute(checkpoint_root).string();
  options.nodes.heartbeat_interval_ms = config.heartbeat().interval_ms();
  options.nodes.heartbeat_timeout_ms = config.heartbeat().timeout_ms();
  options.progress_reports_per_s = config.heartbeat().progress_reports_per_s();
  options.retention_s = int64_t{config.retention().days()} * 24 * 3600;
  options.metrics_rank_series_max_ranks = config.metrics().rank_series_max_ranks();
  options.log_root = config.log_dir();
  options.exports.root = std::filesystem::absolute(config.export_().root()).string();
  options.exports.max_concurrent = config.export_().max_concurrent();
  options.exports.data_root = config.export_().data_root();
  options.store_reader = reader->get();
  {
    const char* path_env = std::getenv("PATH");
    absl::StatusOr<std::string> tool = dhp::controller::FindExportTool(
        config.export_().dhp_ckpt(), SelfDir(), path_env == nullptr ? "" : path_env);
    if (tool.ok()) {
      options.exports.dhp_ckpt = std::filesystem::absolute(*tool).string();
    } else if (!config.export_().dhp_ckpt().empty()) {
      return Fail(std::string(tool.status().message()));
    } else {
      options.exports.dhp_ckpt_error = std::string(tool.status().message());
      DHP_LOG(WARNING) << "exports are off: " << tool.status().message();
    }
  }
  dhp::controller::Controller controller(**store, clock, metrics, options);
  controller.Start();

  dhp::api::ApiMetrics api_metrics(metrics);
  dhp::api::InstrumentedService grpc_service(controller, api_metrics, "grpc");
  dhp::api::InstrumentedService rest_service(controller, api_metrics, "rest");

  const std::string grpc_address = bind + ":" + std::to_string(config.listen().grpc_port());
  absl::StatusOr<std::unique_ptr<dhp::api::GrpcServer>> grpc =
      dhp::api::GrpcServer::Start(grpc_address, grpc_service, auth, *tls,
                                  config.listen().grpc_max_threads());
  if (!grpc.ok()) return Fail(std::string(grpc.status().message()));

  dhp::api::RestGatewayOptions rest_options;
  rest_options.address = bind;
  rest_options.port = static_cast<uint16_t>(config.listen().http_port());
  rest_options.max_connections = static_cast<size_t>(config.listen().http_max_connections());
  rest_options.auth = auth;
  rest_options.tls = https;
  // Requests the gateway answers itself (no route, bad arguments, no token) never reach
  // rest_service's counters: count them too.
  dhp::api::RestGateway rest(
      rest_service, rest_options,
      [&api_metrics](std::string_view route, int status, double seconds, bool reached_service) {
        if (!reached_service) dhp::api::CountGatewayAnswer(api_metrics, route, status, seconds);
      });
  if (absl::Status s = rest.Start(); !s.ok()) return Fail(std::string(s.message()));

  DHP_LOG(INFO) << "dhp-controller: gRPC on " << bind << ":" << (*grpc)->port()
                << (https ? " (TLS)" : "") << ", REST and /metrics on "
                << (https ? "https://" : "http://") << bind << ":" << rest.port() << ", database "
                << db << " (schema v" << (*store)->schema_version() << ")";
  if (!config.port_file().empty() &&
      !WritePortFile(config.port_file(), (*grpc)->port(), rest.port())) {
    return Fail("cannot write the port file " + config.port_file());
  }

  int sig = 0;
  sigwait(&signals, &sig);
  DHP_LOG(INFO) << "dhp-controller: signal " << sig << ", shutting down";
  controller.CloseRendezvous();  // ranks waiting for keys retry against the next controller
  rest.Stop();
  (*grpc)->Shutdown();
  controller.Stop();
  return 0;
}
