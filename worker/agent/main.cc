// dhp-worker: the per-node agent. Registers the node's GPUs / CPU slots with the controller,
// heartbeats, runs the rank processes the controller asks for and ships their logs, until
// SIGINT/SIGTERM (which stops the ranks, SIGKILL after --stop-grace-ms).
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "common/command_line.h"
#include "api/auth.h"
#include "api/client.h"
#include "api/tls.h"
#include "common/logging.h"
#include "common/mutex_mode.h"
#include "common/proto_log.h"
#include "worker/agent/agent.h"
#include "worker/agent/resources.h"

namespace {

// dhp-rank next to this executable, else whatever PATH finds.
std::string DefaultRankBinary() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path sibling = self.parent_path() / "dhp-rank";
    if (access(sibling.c_str(), X_OK) == 0) return sibling.string();
  }
  return "dhp-rank";
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.string();
}

}  // namespace

int main(int argc, char** argv) {
  dhp::RouteProtobufLogs();  // a client's bad bytes cannot fill the log
  dhp::SkipMutexOrderChecks();  // Debian's Abseil checks lock order on every lock
  CLI::App app{"dhp-worker: the dhp node agent"};
  const char* env_server = std::getenv("DHP_SERVER");
  std::string server = env_server ? env_server : "127.0.0.1:7070";
  std::string node_id, address;
  int cpu_slots = 0;
  std::string token_file;
  dhp::api::TlsClientFiles tls_files;
  dhp::api::AddTlsClientFlags(app, &tls_files);
  app.add_option("--controller,--server", server,
                 "Controller gRPC address host:port (env DHP_SERVER)")
      ->capture_default_str();
  app.add_option("--node-id", node_id, "Node id (default: the hostname)");
  app.add_option("--address", address,
                 "Address other nodes reach this one at (default: the hostname)");
  app.add_option("--cpu-slots", cpu_slots,
                 "Rank slots to offer on CPU (default: one per CPU when there is no GPU)");
  app.add_option("--token-file", token_file,
                 "File with the controller's API token (env DHP_TOKEN holds the token itself)");
  std::string rank_binary, log_dir, data_root = ".";
  int stop_grace_ms = 10000;
  app.add_option("--rank-binary", rank_binary,
                 "Rank program (default: dhp-rank beside dhp-worker, else from PATH)");
  app.add_option("--log-dir", log_dir,
                 "Rank logs go to <dir>/<job>/attempt-<a>/rank-<r>.log "
                 "(default: /tmp/dhp-worker-<node-id>/logs)");
  app.add_option("--data-root", data_root,
                 "Passed to every rank as --data-root: relative spec paths resolve under it, "
                 "and spec paths must lie under it or an --allow-data-root")
      ->capture_default_str();
  std::vector<std::string> extra_data_roots;
  bool allow_any_data_path = false;
  bool heartbeat_stream = false;
  app.add_option("--allow-data-root", extra_data_roots,
                 "Another directory job specs' data paths (model.weights_path, annotation_path, "
                 "image_root) may name (repeatable), e.g. /models")
      ->check(CLI::ExistingDirectory);
  app.add_flag("--allow-any-data-path", allow_any_data_path,
               "Let job specs' data paths name any file the ranks can read (trusted users only)");
  app.add_flag("--heartbeat-stream", heartbeat_stream,
               "Heartbeat on one gRPC stream instead of a call per heartbeat (cheaper for the "
               "controller up to a few thousand nodes, dearer at 10,000: bench/results/"
               "control_plane.md)");
  std::string heartbeat_relay;
  app.add_option("--heartbeat-relay", heartbeat_relay,
                 "Send heartbeats through this dhp-relay, host:port, which forwards its agents' "
                 "heartbeats to the controller in batches (for clusters of thousands of nodes); "
                 "when it fails they go to the controller directly")
      ->envname("DHP_HEARTBEAT_RELAY")
      ->excludes("--heartbeat-stream");
  int relay_retry_ms = 30000;
  app.add_option("--heartbeat-relay-retry-ms", relay_retry_ms,
                 "After the relay fails, heartbeats go to the controller directly for this long "
                 "before the relay is tried again")
      ->check(CLI::Range(100, 3600 * 1000))
      ->capture_default_str();
  bool no_progress_relay = false;
  std::string progress_socket;
  app.add_flag("--no-progress-relay", no_progress_relay,
               "Ranks report progress to the controller themselves, not through this agent's "
               "heartbeats (a call per rank report instead of one per node and heartbeat)");
  app.add_option("--progress-socket", progress_socket,
                 "The Unix socket the ranks report progress to (default: progress.sock in the "
                 "log directory, or in a private directory under /tmp where that path is too "
                 "long or the log directory is not this user's alone)");
  app.add_option("--stop-grace-ms", stop_grace_ms,
                 "How long a stopped rank gets between SIGTERM and SIGKILL")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  double peak_tflops = 0;
  app.add_option("--peak-tflops", peak_tflops,
                 "Dense peak TFLOP/s of one device, given to every rank for MFU (default: the "
                 "BF16 peak of known GPU models; none on CPU)")
      ->check(CLI::NonNegativeNumber);
  if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;
  const char* env_token = std::getenv("DHP_TOKEN");
  std::string token = env_token ? env_token : "";
  if (!token_file.empty()) {
    absl::StatusOr<std::string> t = dhp::api::ReadTokenFile(token_file);
    if (!t.ok()) {
      DHP_LOG(ERROR) << t.status().message();
      return 2;
    }
    token = *t;
  }
  absl::StatusOr<dhp::api::TlsPems> tls = dhp::api::LoadTls(tls_files);
  if (!tls.ok()) {
    DHP_LOG(ERROR) << tls.status().message();
    return 2;
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  dhp::worker::AgentOptions options;
  const std::string hostname = dhp::worker::LocalHostname();
  options.node.set_id(node_id.empty() ? hostname : node_id);
  options.node.set_hostname(hostname);
  options.node.set_address(address.empty() ? hostname : address);
  options.node.set_agent_version("dhp-worker 0.1");
  *options.node.mutable_resources() = dhp::worker::DetectResources(cpu_slots);
  options.ranks.node_id = options.node.id();
  if (rank_binary.empty()) rank_binary = DefaultRankBinary();
  // A path is made absolute; a bare name is looked up in PATH when a rank starts.
  options.ranks.rank_binary =
      rank_binary.find('/') == std::string::npos ? rank_binary : Absolute(rank_binary);
  options.ranks.controller = server;
  options.ranks.token_file = token_file.empty() ? "" : Absolute(token_file);
  options.ranks.tls_args = dhp::api::TlsClientArgs(tls_files);
  options.ranks.data_root = data_root;
  for (const std::string& root : extra_data_roots) {
    options.ranks.extra_data_roots.push_back(Absolute(root));
  }
  options.ranks.allow_any_data_path = allow_any_data_path;
  options.heartbeat_stream = heartbeat_stream;
  options.relay_retry_ms = relay_retry_ms;
  options.relay_progress = !no_progress_relay;
  options.progress_socket = progress_socket.empty() ? "" : Absolute(progress_socket);
  options.ranks.log_dir =
      Absolute(log_dir.empty() ? "/tmp/dhp-worker-" + options.node.id() + "/logs" : log_dir);
  options.ranks.stop_grace_ms = stop_grace_ms;
  options.ranks.peak_tflops = peak_tflops;
  DHP_LOG(INFO) << "ranks run " << options.ranks.rank_binary << ", logs under "
                << options.ranks.log_dir;

  dhp::api::DhpClient client(server, 5000, token, *tls);
  // The relay's own deadline to the controller (dhp-relay --timeout-ms, 4 s) is below this
  // client's 5 s, so that a batch that failed is answered as such; the heartbeat then goes to
  // the controller directly.
  std::unique_ptr<dhp::api::DhpClient> relay;
  if (!heartbeat_relay.empty()) {
    relay = std::make_unique<dhp::api::DhpClient>(heartbeat_relay, 5000, token, *tls);
    DHP_LOG(INFO) << "heartbeats go through the relay " << heartbeat_relay;
  }
  dhp::worker::Agent agent(client, options, relay.get());
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    DHP_LOG(INFO) << "dhp-worker: signal " << sig << ", stopping";
    agent.Stop();
  });
  agent.Run();
  waiter.join();
  return 0;
}
