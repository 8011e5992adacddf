// GrpcKvClient: a KvClient on the controller's rendezvous KV (WorkerService.Kv* over gRPC),
// scoped to one job run attempt: every key lives in the namespace (job_id, attempt), so a new
// attempt starts from an empty store.
//
// Long waits are split into calls of at most `max_call_wait` (the controller caps a single wait,
// by default at 10 min) and retried on DEADLINE_EXCEEDED until the caller's timeout has passed;
// the final error is the controller's, which names the keys still missing. Other errors
// (UNAVAILABLE, CANCELLED when the run ended, FAILED_PRECONDITION for a stale attempt) are
// returned at once.
//
// Thread-safety: thread-safe (DhpClient is). The DhpClient is borrowed and must outlive this.
#ifndef DHP_WORKER_COMM_GRPC_KV_CLIENT_H_
#define DHP_WORKER_COMM_GRPC_KV_CLIENT_H_

#include <chrono>
#include <string>
#include <vector>

#include "api/client.h"
#include "worker/comm/kv_client.h"

namespace dhp::comm {

class GrpcKvClient : public KvClient {
 public:
  GrpcKvClient(api::DhpClient& client, std::string job_id, int attempt,
               std::chrono::milliseconds max_call_wait = std::chrono::seconds(60));

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

  api::DhpClient& client_;
  const std::string job_id_;
  const int attempt_;
  const std::chrono::milliseconds max_call_wait_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_GRPC_KV_CLIENT_H_
