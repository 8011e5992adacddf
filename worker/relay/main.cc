// dhp-relay: a heartbeat relay. The agents of a rack or pod send it their heartbeats
// (dhp-worker --heartbeat-relay HOST:PORT); it forwards what arrives within --window-ms to the
// controller as one WorkerService.HeartbeatBatch call, so that the controller handles one call
// per batch instead of one per agent (bench/results/control_plane.md). Each heartbeat keeps its
// agent's own credential. Agents fall back to the controller when the relay is down.
// Runs until SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "CLI/CLI.hpp"
#include "common/command_line.h"
#include "absl/strings/numbers.h"
#include "api/auth.h"
#include "api/client.h"
#include "api/http_server.h"
#include "api/tls.h"
#include "common/logging.h"
#include "common/mutex_mode.h"
#include "common/proto_log.h"
#include "worker/relay/heartbeat_batcher.h"
#include "worker/relay/relay_metrics.h"
#include "worker/relay/relay_server.h"

namespace {

// {"grpc_port": G} and, with metrics served, "metrics_port": M.
bool WritePortFile(const std::string& path, int port, int metrics_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "{\"grpc_port\": " << port;
    if (metrics_port > 0) out << ", \"metrics_port\": " << metrics_port;
    out << "}\n";
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

// "host:port" (an IPv6 host in brackets; ":port" is every interface) into options; false when
// it does not parse.
bool ParseListen(const std::string& listen, dhp::api::HttpServerOptions* options) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return false;
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  options->address = host;
  options->port = static_cast<uint16_t>(port);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  dhp::RouteProtobufLogs();  // a client's bad bytes cannot fill the log
  dhp::SkipMutexOrderChecks();  // Debian's Abseil checks lock order on every lock
  CLI::App app{"dhp-relay: forwards agents' heartbeats to the dhp controller in batches"};
  const char* env_server = std::getenv("DHP_SERVER");
  std::string server = env_server ? env_server : "127.0.0.1:7070";
  std::string listen = "0.0.0.0:7075", metrics_listen, port_file, token_file;
  dhp::api::TlsClientFiles tls_files;
  dhp::api::AddTlsClientFlags(app, &tls_files);
  dhp::api::TlsServerFiles serve_tls;
  dhp::worker::HeartbeatBatcherOptions batching;
  int timeout_ms = 4000;
  app.add_option("--controller,--server", server,
                 "Controller gRPC address host:port (env DHP_SERVER)")
      ->capture_default_str();
  app.add_option("--listen", listen, "Where agents reach this relay, host:port (port 0: any)")
      ->capture_default_str();
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve Prometheus metrics at GET /metrics (and /healthz) on host:port or :port "
                 "(every interface; port 0: any); off when empty");
  app.add_option("--port-file", port_file,
                 "Write {\"grpc_port\": N, \"metrics_port\": M} here once listening");
  app.add_option("--token-file", token_file,
                 "File with this relay's own token: a node's (env DHP_TOKEN holds the token "
                 "itself). Each heartbeat still goes with its agent's token.");
  app.add_option("--tls-cert", serve_tls.cert_file, "Serve agents over TLS with this certificate");
  app.add_option("--tls-key", serve_tls.key_file, "The key of --tls-cert");
  app.add_option("--window-ms", batching.window_ms,
                 "The longest a heartbeat waits for others to join its batch")
      ->capture_default_str();
  app.add_option("--max-batch", batching.max_batch, "Heartbeats per HeartbeatBatch call, at most")
      ->capture_default_str();
  app.add_option("--max-batch-bytes", batching.max_batch_bytes,
                 "A batch's size on the wire, at most (below the controller's 16 MiB)")
      ->capture_default_str()
      ->check(dhp::WholeNumber());
  app.add_option("--max-batch-elements", batching.max_batch_elements,
                 "A batch's messages and strings at every depth, at most (the controller takes "
                 "262144 in one request)")
      ->capture_default_str()
      ->check(dhp::WholeNumber());
  app.add_option("--senders", batching.senders, "Batches in flight to the controller at once")
      ->capture_default_str();
  app.add_option("--max-queued", batching.max_queued,
                 "Heartbeats waiting at most; past it agents are told to go to the controller")
      ->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms,
                 "Deadline of a HeartbeatBatch call (below the agents' own 5 s, so that they "
                 "can still reach the controller directly)")
      ->capture_default_str()
      ->check(CLI::Range(100, 60000));
  if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;
  auto fail = [](const std::string& message) {
    DHP_LOG(ERROR) << "dhp-relay: " << message;
    return 2;
  };
  if (absl::Status s = dhp::worker::Validate(batching); !s.ok()) {
    return fail(std::string(s.message()));
  }
  dhp::api::HttpServerOptions http = dhp::worker::RelayHttpServerOptions();
  if (!metrics_listen.empty() && !ParseListen(metrics_listen, &http)) {
    return fail("--metrics-listen: \"" + metrics_listen + "\" is not host:port");
  }
  const char* env_token = std::getenv("DHP_TOKEN");
  std::string token = env_token ? env_token : "";
  if (!token_file.empty()) {
    absl::StatusOr<std::string> t = dhp::api::ReadTokenFile(token_file);
    if (!t.ok()) return fail(std::string(t.status().message()));
    token = *t;
  }
  absl::StatusOr<dhp::api::TlsPems> tls = dhp::api::LoadTls(tls_files);
  if (!tls.ok()) return fail(std::string(tls.status().message()));
  absl::StatusOr<dhp::api::TlsPems> served = dhp::api::LoadTls(serve_tls);
  if (!served.ok()) return fail(std::string(served.status().message()));

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  dhp::api::DhpClient controller(server, timeout_ms, token, *tls);
  dhp::worker::RelayMetrics metrics;
  dhp::worker::HeartbeatBatcher batcher(controller, batching, &metrics);
  metrics.SetQueued([&batcher] { return batcher.queued(); });
  dhp::api::HttpServer metrics_server(http, dhp::worker::RelayHttpHandler(metrics));
  if (!metrics_listen.empty()) {
    if (absl::Status s = metrics_server.Start(); !s.ok()) {
      return fail("--metrics-listen " + metrics_listen + ": " + std::string(s.message()));
    }
  }
  absl::StatusOr<std::unique_ptr<dhp::worker::RelayServer>> relay =
      dhp::worker::RelayServer::Start(listen, batcher, *served, &metrics);
  if (!relay.ok()) return fail(std::string(relay.status().message()));
  if (!port_file.empty() && !WritePortFile(port_file, (*relay)->port(), metrics_server.port())) {
    return fail("cannot write the port file " + port_file);
  }
  DHP_LOG(INFO) << "dhp-relay: agents' heartbeats on port " << (*relay)->port() << " go to "
                << server << " in batches of up to " << batching.max_batch << " within "
                << batching.window_ms << " ms";
  int sig = 0;
  sigwait(&signals, &sig);
  relay->reset();  // no new heartbeats; those in flight are answered
  metrics_server.Stop();
  const dhp::worker::HeartbeatBatcherStats stats = batcher.stats();
  DHP_LOG(INFO) << "dhp-relay: signal " << sig << ", stopping after relaying " << stats.heartbeats
                << " heartbeats in " << stats.batches << " batches (" << stats.failed_batches
                << " failed, " << stats.refused << " refused)";
  return 0;
}
