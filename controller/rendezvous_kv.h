// RendezvousKv: the key-value store ranks bootstrap their process groups on (c10d Store
// semantics: set, blocking get, add, wait, check, delete), one namespace per job run attempt.
//
// It lives in memory, not in SQLite: its keys matter only while a run's ranks are forming
// their groups, and a new attempt always starts a fresh namespace. Waits block the calling
// (gRPC/REST) thread, never the controller's loop.
//
// Thread-safety: all methods are thread-safe; mu_ guards scopes_ and every waiter is woken on
// each change.
#ifndef DHP_CONTROLLER_RENDEZVOUS_KV_H_
#define DHP_CONTROLLER_RENDEZVOUS_KV_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dhp::controller {

struct KvScopeKey {
  std::string job_id;
  int attempt = 0;
  bool operator<(const KvScopeKey& o) const {
    return std::tie(job_id, attempt) < std::tie(o.job_id, o.attempt);
  }
};

class RendezvousKv {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 4 << 20;

  absl::Status Set(const KvScopeKey& scope, const std::string& key, const std::string& value);
  // Waits up to `timeout` for the key; DEADLINE_EXCEEDED names it. timeout 0: no wait
  // (NOT_FOUND if absent).
  absl::StatusOr<std::string> Get(const KvScopeKey& scope, const std::string& key,
                                  std::chrono::milliseconds timeout);
  // Adds `delta` to the integer stored at key (absent counts as 0) and returns the sum.
  // FAILED_PRECONDITION if the key holds something that is not an integer.
  absl::StatusOr<int64_t> Add(const KvScopeKey& scope, const std::string& key, int64_t delta);
  // Waits until all keys exist; DEADLINE_EXCEEDED lists the keys still missing.
  absl::Status Wait(const KvScopeKey& scope, const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout);
  bool Check(const KvScopeKey& scope, const std::vector<std::string>& keys);
  bool Delete(const KvScopeKey& scope, const std::string& key);
  // Forgets every key of a job's attempt (its run ended), waking its waiters with CANCELLED.
  void DropScope(const KvScopeKey& scope);
  size_t KeyCount(const KvScopeKey& scope);

 private:
  using Keys = std::map<std::string, std::string>;
  std::vector<std::string> MissingLocked(const KvScopeKey& scope,
                                         const std::vector<std::string>& keys);

  std::mutex mu_;  // guards scopes_ and dropped_generation_
  std::condition_variable changed_;
  std::map<KvScopeKey, Keys> scopes_;
  uint64_t dropped_generation_ = 0;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_RENDEZVOUS_KV_H_
