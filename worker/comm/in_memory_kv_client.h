// InMemoryKvClient: a KvClient backed by a std::map, for tests (many in-process ranks share one)
// and for single-process runs without a controller. Same semantics and error codes as the
// controller's rendezvous KV (see kv_client.h).
//
// Thread-safety: thread-safe; mu_ guards keys_ and every change wakes all waiters.
#ifndef DHP_WORKER_COMM_IN_MEMORY_KV_CLIENT_H_
#define DHP_WORKER_COMM_IN_MEMORY_KV_CLIENT_H_

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "worker/comm/kv_client.h"

namespace dhp::comm {

class InMemoryKvClient : public KvClient {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;
  absl::StatusOr<bool> Delete(const std::string& key) override;

  size_t KeyCount() const;
  // Every key, sorted (for tests).
  std::vector<std::string> Keys() const;

 private:
  std::vector<std::string> MissingLocked(const std::vector<std::string>& keys) const;

  mutable std::mutex mu_;  // guards keys_
  std::condition_variable changed_;
  std::map<std::string, std::string> keys_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_IN_MEMORY_KV_CLIENT_H_
