// dhp-worker: the per-node agent. Registers the node's GPUs / CPU slots with the controller
// and heartbeats until SIGINT/SIGTERM.
#include <signal.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "api/auth.h"
#include "api/client.h"
#include "common/logging.h"
#include "worker/agent/agent.h"
#include "worker/agent/resources.h"

int main(int argc, char** argv) {
  CLI::App app{"dhp-worker: the dhp node agent"};
  const char* env_server = std::getenv("DHP_SERVER");
  std::string server = env_server ? env_server : "127.0.0.1:7070";
  std::string node_id, address;
  int cpu_slots = 0;
  std::string token_file;
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
  CLI11_PARSE(app, argc, argv);
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

  dhp::api::DhpClient client(server, 5000, token);
  dhp::worker::Agent agent(client, options);
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
