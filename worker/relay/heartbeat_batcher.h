// HeartbeatBatcher: agents' heartbeats, forwarded to the controller as WorkerService.
// HeartbeatBatch calls, the core of dhp-relay (worker/relay/main.cc).
//
// A heartbeat waits at most `window_ms` for others to join it, and a batch holds at most
// `max_batch`; so at 1,250 heartbeats a second (2,500 agents at 2 s) and a 20 ms window a batch
// carries about 25, and the controller pays for one call where it paid for 25. A batch also
// stays within `max_batch_bytes` and `max_batch_elements`, and relays at most
// api::kMaxBatchProgress progress reports (below what the controller accepts in one request),
// so that one agent's large heartbeat never makes its neighbours' fail: a
// heartbeat that would pass either starts the next batch (alone, if need be). Each heartbeat
// goes with its agent's own `authorization`, which the controller checks as it checks the
// agent's own Heartbeat call; the batch itself goes with the relay's credential (a node's
// token). Each `Answer` gets what the controller answered to that heartbeat (NOT_FOUND,
// PERMISSION_DENIED, ... or the response), or the batch's failure (UNAVAILABLE when the
// controller cannot be reached, DEADLINE_EXCEEDED past the client's deadline). More than
// `max_queued` waiting: RESOURCE_EXHAUSTED at once, so that the agent goes to the controller
// directly. A heartbeat the controller would refuse (api::CheckHeartbeatLimits: too many
// progress reports or ranks, an unknown rank state) is answered INVALID_ARGUMENT at once, with
// the controller's message, and never joins a batch.
//
// `senders` threads each send one batch at a time. Thread-safe; Answer runs on a sender thread
// (or on the caller's, for a refusal) and must not block.
#ifndef DHP_WORKER_RELAY_HEARTBEAT_BATCHER_H_
#define DHP_WORKER_RELAY_HEARTBEAT_BATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "api/client.h"
#include "api/grpc_decode.h"
#include "dhp/v1/service.pb.h"

namespace dhp::worker {

struct HeartbeatBatcherOptions {
  int max_batch = 256;  // at most api::kMaxHeartbeatBatch
  // A batch's size on the wire, at most (HeartbeatBatchBytes of its heartbeats); below the
  // controller's 16 MiB receive limit. A heartbeat larger on its own goes alone (the relay
  // receives at most 4 MiB).
  int64_t max_batch_bytes = int64_t{8} << 20;
  // A batch's messages, strings and bytes fields at every depth, at most (the sum of its
  // heartbeats' HeartbeatBatchElements); at most api::kMaxRequestElements, beyond which the
  // controller refuses the whole request. Half of it by default: a controller built from a newer
  // .proto may look into fields this relay counts once.
  int64_t max_batch_elements = api::kMaxRequestElements / 2;
  int window_ms = 20;
  int senders = 2;
  int max_queued = 20000;
};

// What one heartbeat, `heartbeat_bytes` long serialized, adds to a HeartbeatBatchRequest's
// serialized size: its RelayedHeartbeat (the heartbeat and `authorization`) with the field
// tags and lengths.
int64_t HeartbeatBatchBytes(const std::string& authorization, int64_t heartbeat_bytes);
// What one heartbeat (`heartbeat_wire`, its serialized bytes) adds to a HeartbeatBatchRequest's
// count of elements as the controller counts them (common/proto_wire_budget.h): its
// RelayedHeartbeat, `authorization` and `heartbeat` fields and every element inside the
// heartbeat. Counting stops past `limit` (a result over it means "more than limit").
int64_t HeartbeatBatchElements(const std::string& authorization,
                               const std::string& heartbeat_wire, int64_t limit);


// INVALID_ARGUMENT naming the option and its bounds.
absl::Status Validate(const HeartbeatBatcherOptions& options);

// Told what the batcher does (dhp-relay's /metrics: worker/relay/relay_metrics.h). Called from
// the batcher's threads and the callers of Submit, concurrently: thread-safe, must not block.
class HeartbeatBatcherObserver {
 public:
  virtual ~HeartbeatBatcherObserver() = default;
  // One HeartbeatBatch call: how many heartbeats it carried, how long it took, and its outcome
  // as a whole (OK when the controller answered every heartbeat, whatever each answer).
  virtual void OnBatch(int heartbeats, double seconds, absl::StatusCode code) = 0;
  // One heartbeat answered (refusals included): its answer's code and the time since it came.
  virtual void OnAnswer(absl::StatusCode code, double seconds) = 0;
};

struct HeartbeatBatcherStats {
  int64_t heartbeats = 0;      // answered, whatever the answer
  int64_t batches = 0;         // HeartbeatBatch calls made
  int64_t failed_batches = 0;  // calls that failed as a whole
  int64_t refused = 0;         // RESOURCE_EXHAUSTED: the queue was full
  int64_t invalid = 0;         // INVALID_ARGUMENT: api::CheckHeartbeatLimits refused it
};

class HeartbeatBatcher {
 public:
  using Answer = std::function<void(const absl::Status&, v1::HeartbeatResponse)>;

  // `controller` and `observer` (may be null) must outlive this; options as Validate accepts.
  HeartbeatBatcher(api::DhpClient& controller, HeartbeatBatcherOptions options,
                   HeartbeatBatcherObserver* observer = nullptr);
  // What is still queued is sent at once, and this waits for those batches' answers; a
  // Submit from then on is answered UNAVAILABLE.
  ~HeartbeatBatcher();
  HeartbeatBatcher(const HeartbeatBatcher&) = delete;
  HeartbeatBatcher& operator=(const HeartbeatBatcher&) = delete;

  void Submit(std::string authorization, v1::HeartbeatRequest heartbeat, Answer answer);
  HeartbeatBatcherStats stats() const;
  int64_t queued() const;  // heartbeats waiting for their batch to be sent

 private:
  struct Pending {
    std::chrono::steady_clock::time_point arrived;
    std::string authorization;
    v1::HeartbeatRequest heartbeat;
    Answer answer;
    int64_t bytes;     // HeartbeatBatchBytes
    int64_t elements;  // HeartbeatBatchElements
    int progress;      // heartbeat.progress_size()
  };
  void SendLoop();
  // The next batch, once its oldest heartbeat has waited the window or it is full; empty when
  // stopping with nothing queued.
  std::vector<Pending> Take();
  // The queue holds a full batch (by count, bytes, elements or progress). With mu_ held.
  bool FullLocked() const;
  void Send(std::vector<Pending> batch);
  void Answered(const Pending& p, const absl::Status& s);  // tells the observer

  api::DhpClient& controller_;
  const HeartbeatBatcherOptions options_;
  HeartbeatBatcherObserver* const observer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  int64_t queued_bytes_ = 0;   // guarded by mu_: the sum of queue_'s Pending::bytes
  int64_t queued_elements_ = 0;  // guarded by mu_: the sum of queue_'s Pending::elements
  int64_t queued_progress_ = 0;  // guarded by mu_: the sum of queue_'s Pending::progress
  bool stopping_ = false;      // guarded by mu_
  HeartbeatBatcherStats stats_;  // guarded by mu_
  std::vector<std::thread> senders_;
};

}  // namespace dhp::worker

#endif  // DHP_WORKER_RELAY_HEARTBEAT_BATCHER_H_
