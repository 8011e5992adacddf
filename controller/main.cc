// dhp-controller: the control-plane daemon. Serves gRPC and REST on loopback by default,
// keeps its state in SQLite under --data-dir, and stops cleanly on SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "api/auth.h"
#include "api/grpc_server.h"
#include "api/instrumented_service.h"
#include "api/rest_gateway.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "controller/controller.h"
#include "controller/store.h"

namespace {

struct Flags {
  std::string data_dir = "/var/lib/dhp";
  std::string db;
  std::string checkpoint_root;
  std::string bind = "127.0.0.1";
  int grpc_port = 7070;
  int http_port = 7080;
  std::string port_file;
  int heartbeat_interval_ms = 2000;
  int heartbeat_timeout_ms = 10000;
  std::string auth_token_file;
};

void ParseFlags(int argc, char** argv, Flags& f, CLI::App& app) {
  app.add_option("--data-dir", f.data_dir, "Directory for the database and checkpoints")
      ->capture_default_str();
  app.add_option("--db", f.db, "SQLite database path (default: <data-dir>/dhp.db)");
  app.add_option("--checkpoint-root", f.checkpoint_root,
                 "Checkpoint directories of jobs must lie inside this root "
                 "(default: <data-dir>/checkpoints)");
  app.add_option("--bind", f.bind,
                 "Address to listen on. The default serves this host only; use 0.0.0.0 to "
                 "expose the API to the network")
      ->capture_default_str();
  app.add_option("--grpc-port", f.grpc_port, "gRPC port (0: pick a free one)")
      ->capture_default_str();
  app.add_option("--http-port", f.http_port, "REST/metrics port (0: pick a free one)")
      ->capture_default_str();
  app.add_option("--port-file", f.port_file,
                 "Write {\"grpc_port\":N,\"http_port\":M} here once listening");
  app.add_option("--heartbeat-interval-ms", f.heartbeat_interval_ms,
                 "Heartbeat interval told to workers")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout-ms", f.heartbeat_timeout_ms,
                 "Silence after which a worker is marked LOST")
      ->capture_default_str();
  app.add_option("--auth-token-file", f.auth_token_file,
                 "Require 'authorization: Bearer <token>' (the file's content) on every API call "
                 "except /healthz and /metrics");
  app.parse(argc, argv);
  if (f.db.empty()) f.db = f.data_dir + "/dhp.db";
  if (f.checkpoint_root.empty()) f.checkpoint_root = f.data_dir + "/checkpoints";
}

bool WritePortFile(const std::string& path, int grpc_port, int http_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"grpc_port\": " << grpc_port << ", \"http_port\": " << http_port << "}\n";
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

int Fail(const std::string& message) {
  DHP_LOG(ERROR) << message;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dhp-controller: the dhp control plane"};
  Flags flags;
  try {
    ParseFlags(argc, argv, flags, app);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // Handle SIGINT/SIGTERM synchronously in main; every thread started below inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(flags.db).parent_path(), ec);
  std::filesystem::create_directories(flags.checkpoint_root, ec);
  if (ec) return Fail("cannot create " + flags.checkpoint_root + ": " + ec.message());

  absl::StatusOr<std::unique_ptr<dhp::controller::Store>> store =
      dhp::controller::Store::Open(flags.db);
  if (!store.ok()) return Fail("cannot open the database " + flags.db + ": " +
                               std::string(store.status().message()));

  dhp::api::TokenAuth auth;
  if (!flags.auth_token_file.empty()) {
    absl::StatusOr<std::string> token = dhp::api::ReadTokenFile(flags.auth_token_file);
    if (!token.ok()) return Fail(std::string(token.status().message()));
    auth = dhp::api::TokenAuth(*token);
  } else if (flags.bind != "127.0.0.1" && flags.bind != "localhost" && flags.bind != "::1") {
    DHP_LOG(WARNING) << "listening on " << flags.bind << " without --auth-token-file: anyone "
                     << "who can reach this host can submit and cancel jobs";
  }

  dhp::SystemClock clock;
  dhp::MetricsRegistry metrics;
  dhp::controller::ControllerOptions options;
  options.spec.checkpoint_root = std::filesystem::absolute(flags.checkpoint_root).string();
  options.nodes.heartbeat_interval_ms = flags.heartbeat_interval_ms;
  options.nodes.heartbeat_timeout_ms = flags.heartbeat_timeout_ms;
  options.log_root = flags.data_dir + "/logs";
  dhp::controller::Controller controller(**store, clock, metrics, options);
  controller.Start();

  dhp::api::ApiMetrics api_metrics(metrics);
  dhp::api::InstrumentedService grpc_service(controller, api_metrics, "grpc");
  dhp::api::InstrumentedService rest_service(controller, api_metrics, "rest");

  const std::string grpc_address = flags.bind + ":" + std::to_string(flags.grpc_port);
  absl::StatusOr<std::unique_ptr<dhp::api::GrpcServer>> grpc =
      dhp::api::GrpcServer::Start(grpc_address, grpc_service, auth);
  if (!grpc.ok()) return Fail(std::string(grpc.status().message()));

  dhp::api::RestGatewayOptions rest_options;
  rest_options.address = flags.bind;
  rest_options.port = static_cast<uint16_t>(flags.http_port);
  rest_options.auth = auth;
  dhp::api::RestGateway rest(rest_service, rest_options);
  if (absl::Status s = rest.Start(); !s.ok()) return Fail(std::string(s.message()));

  DHP_LOG(INFO) << "dhp-controller: gRPC on " << flags.bind << ":" << (*grpc)->port()
                << ", REST and /metrics on http://" << flags.bind << ":" << rest.port()
                << ", database " << flags.db << " (schema v" << (*store)->schema_version()
                << ")";
  if (!flags.port_file.empty() && !WritePortFile(flags.port_file, (*grpc)->port(), rest.port())) {
    return Fail("cannot write the port file " + flags.port_file);
  }

  int sig = 0;
  sigwait(&signals, &sig);
  DHP_LOG(INFO) << "dhp-controller: signal " << sig << ", shutting down";
  rest.Stop();
  (*grpc)->Shutdown();
  controller.Stop();
  return 0;
}
