// Agent: the dhp-worker daemon's control loop. Registers this node with the controller and
// heartbeats; re-registers when the controller has forgotten it (NOT_FOUND) and keeps retrying
// with backoff while the controller is unreachable, so a controller restart needs nothing
// from the operator. (Launching rank processes comes with the scheduler.)
//
// Thread-safety: Run blocks on the calling thread; Stop may be called from any thread.
#ifndef DHP_WORKER_AGENT_AGENT_H_
#define DHP_WORKER_AGENT_AGENT_H_

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>

#include "api/client.h"
#include "dhp/v1/node.pb.h"

namespace dhp::worker {

struct AgentOptions {
  v1::Node node;                 // id, hostname, address, resources, agent_version
  int retry_initial_ms = 200;    // backoff while the controller is unreachable
  int retry_max_ms = 5000;
};

class Agent {
 public:
  Agent(api::DhpClient& client, AgentOptions options);

  // Runs until Stop. Returns the number of successful registrations (for tests and logs).
  int Run();
  void Stop();
  bool registered() const { return registered_.load(); }

 private:
  bool Register(int* heartbeat_ms);
  // Sleeps up to `ms`; false when stopped meanwhile.
  bool SleepFor(int ms);

  api::DhpClient& client_;
  const AgentOptions options_;
  std::atomic<bool> registered_{false};
  std::mutex mu_;  // guards stopped_ (with cv_ for interruptible sleeps)
  std::condition_variable cv_;
  bool stopped_ = false;
};

}  // namespace dhp::worker

#endif  // DHP_WORKER_AGENT_AGENT_H_
