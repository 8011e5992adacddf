// KvClient: the rendezvous key-value store a rank bootstraps its process groups on, as seen
// from the rank. One client is bound to one namespace (in production a job's run attempt on the
// controller, see grpc_kv_client.h); keys are opaque strings, values are bytes.
//
// Semantics follow c10d::Store and the controller's RendezvousKv: Get and Wait block up to
// `timeout` for keys to appear and then fail with DEADLINE_EXCEEDED naming the keys still
// missing; a zero timeout does not wait (Get: NOT_FOUND if absent). Add treats an absent key as 0
// and stores the sum as decimal text (FAILED_PRECONDITION if the key holds a non-integer).
//
// Implementations must be thread-safe: Gloo and the arrival barrier call them from several
// threads, and in tests many in-process ranks share one client.
#ifndef DHP_WORKER_COMM_KV_CLIENT_H_
#define DHP_WORKER_COMM_KV_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dhp::comm {

class KvClient {
 public:
  virtual ~KvClient() = default;

  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  virtual absl::StatusOr<std::string> Get(const std::string& key,
                                          std::chrono::milliseconds timeout) = 0;
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout) = 0;
  // True when every key exists. Does not block.
  virtual absl::StatusOr<bool> Check(const std::vector<std::string>& keys) = 0;
  // True if the key existed.
  virtual absl::StatusOr<bool> Delete(const std::string& key) = 0;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_KV_CLIENT_H_
