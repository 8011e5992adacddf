// GrpcKvClient: a KvClient on the controller's rendezvous KV (WorkerService.Kv* over gRPC),
// scoped to one job run attempt: every key lives in the namespace (job_id, attempt), so a new
// attempt starts from an empty store.
//
// Long waits are split into calls of at most `max_call_wait` (the controller caps a single wait,
// by default at 10 min) and retried on DEADLINE_EXCEEDED until the caller's timeout has passed;
// the final error is the controller's, which names the keys still missing.
//
// A controller restart costs a retry, not the attempt (the controller keeps the keys across
// it): a call answered UNAVAILABLE (connection refused or reset, the controller stopping, a wait
// cut short by its stop) is sent again after a backoff (`initial_backoff` doubling to
// `max_backoff`) until its retry deadline has passed, and then returns that UNAVAILABLE. The
// retry deadline is `retry_for` from the call's start for Set, Add, Check and Delete (which take
// no timeout; the rank passes its store timeout), and the later of that and the caller's timeout
// for Get and Wait. A wait re-issued after its timeout has passed asks the controller once more
// without waiting (DEADLINE_EXCEEDED still names the missing keys).
// Add and Delete are not idempotent: each call carries a request id (this client's random id and
// a counter), the same for all its retries, and the controller answers a retry of a call it has
// applied already (its reply was lost) with the first answer instead of applying it again. Set is
// idempotent; Get, Wait and Check change nothing. Other errors (CANCELLED when the run ended,
// FAILED_PRECONDITION for a stale attempt) are returned at once.
//
// Thread-safety: thread-safe (DhpClient is). The DhpClient is borrowed and must outlive this.
#ifndef DHP_WORKER_COMM_GRPC_KV_CLIENT_H_
#define DHP_WORKER_COMM_GRPC_KV_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "api/client.h"
#include "worker/comm/kv_client.h"

namespace dhp::comm {

struct GrpcKvClientOptions {
  // The longest wait asked of the controller in one call.
  std::chrono::milliseconds max_call_wait = std::chrono::seconds(60);
  // How long a call retries while the controller is unavailable (see above).
  std::chrono::milliseconds retry_for = std::chrono::seconds(60);
  std::chrono::milliseconds initial_backoff = std::chrono::milliseconds(50);
  std::chrono::milliseconds max_backoff = std::chrono::seconds(1);
};

class GrpcKvClient : public KvClient {
 public:
  GrpcKvClient(api::DhpClient& client, std::string job_id, int attempt,
               GrpcKvClientOptions options = GrpcKvClientOptions());

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<bool> Delete(const std::string& key) override;

 private:
  void FillScope(v1::KvScope* scope) const;
  // A request id no other call of this client (or, almost surely, of any client) uses.
  std::string NextRequestId();

  api::DhpClient& client_;
  const std::string job_id_;
  const int attempt_;
  const GrpcKvClientOptions options_;
  const std::string client_id_;  // random, 16 hex digits
  std::atomic<uint64_t> next_request_{1};
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_GRPC_KV_CLIENT_H_
