// RendezvousKv: the key-value store ranks bootstrap their process groups on (c10d Store
// semantics: set, blocking get, add, wait, check, delete), one namespace per job run attempt.
//
// Keys live in memory and, given a Store, in SQLite too, so that a controller restart while
// ranks bootstrap costs them a retry, not the attempt: every change is written to the store
// before it becomes visible (a few writes per rank and process group, once per attempt; none
// while training), and Load brings back the keys of attempts whose run has not ended. A new
// attempt starts a fresh namespace; DropScope forgets one, in memory and in the store, when its
// run ends. Waits block the calling (gRPC/REST) thread, never the controller's loop; Close ends
// them with UNAVAILABLE when the controller stops, and the rank's client re-issues them to the
// next controller.
//
// Retried calls: an Add or Delete with a request id remembers its answer (in memory, and in the
// store in the same transaction as its change) and answers a repeat of that id with it instead
// of applying it again, so a client that retries after a lost reply changes nothing twice. Set
// is idempotent; Get, Wait and Check change nothing.
//
// Thread-safety: all methods are thread-safe; mu_ guards scopes_ and closed_, and every waiter
// is woken on each change. The store is written under mu_ on the calling thread, so with a
// store the changing methods (Set, Add, Delete, DropScope, Load) must be called on the store's
// thread only (the controller's loop); Get, Wait, Check and KeyCount on any.
#ifndef DHP_CONTROLLER_RENDEZVOUS_KV_H_
#define DHP_CONTROLLER_RENDEZVOUS_KV_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/store.h"

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
  static constexpr size_t kMaxRequestIdBytes = 128;

  // `store`: where changes are kept (borrowed; must outlive this); null: memory only.
  explicit RendezvousKv(Store* store = nullptr) : store_(store) {}

  // Adds the stored keys of attempts whose run has not ended (Store::LoadKv). Call once,
  // before serving.
  absl::Status Load();

  absl::Status Set(const KvScopeKey& scope, const std::string& key, const std::string& value);
  // Waits up to `timeout` for the key; DEADLINE_EXCEEDED names it. timeout 0: no wait
  // (NOT_FOUND if absent).
  absl::StatusOr<std::string> Get(const KvScopeKey& scope, const std::string& key,
                                  std::chrono::milliseconds timeout);
  // Adds `delta` to the integer stored at key (absent counts as 0) and returns the sum.
  // FAILED_PRECONDITION if the key holds something that is not an integer. A non-empty
  // `request_id` seen before in this scope returns that call's sum and adds nothing.
  absl::StatusOr<int64_t> Add(const KvScopeKey& scope, const std::string& key, int64_t delta,
                              const std::string& request_id = "");
  // Waits until all keys exist; DEADLINE_EXCEEDED lists the keys still missing.
  absl::Status Wait(const KvScopeKey& scope, const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout);
  bool Check(const KvScopeKey& scope, const std::vector<std::string>& keys);
  // True if the key existed. A `request_id` seen before returns that call's answer.
  absl::StatusOr<bool> Delete(const KvScopeKey& scope, const std::string& key,
                              const std::string& request_id = "");
  // Forgets every key of a job's attempt (its run ended), waking its waiters with CANCELLED.
  // Forgotten in memory even when deleting the stored keys fails (that error is returned;
  // the next Load deletes them).
  absl::Status DropScope(const KvScopeKey& scope);
  // The controller is stopping: waits in flight and every later Get, Wait, Set, Add and Delete
  // end with UNAVAILABLE, which the ranks' clients retry against the next controller.
  void Close();
  size_t KeyCount(const KvScopeKey& scope);

 private:
  struct Scope {
    std::map<std::string, std::string> keys;
    std::map<std::string, int64_t> replies;  // by request id: Add's sum, Delete's 1 or 0
  };

  std::vector<std::string> MissingLocked(const KvScopeKey& scope,
                                         const std::vector<std::string>& keys);
  // Writes a change to the store (if any) before it is applied. mu_ held.
  absl::Status PersistLocked(const KvScopeKey& scope, const std::string& key,
                             std::optional<std::string> value, const std::string& request_id,
                             int64_t reply);

  Store* const store_;
  std::mutex mu_;  // guards scopes_, dropped_generation_ and closed_
  std::condition_variable changed_;
  std::map<KvScopeKey, Scope> scopes_;
  uint64_t dropped_generation_ = 0;
  bool closed_ = false;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_RENDEZVOUS_KV_H_
