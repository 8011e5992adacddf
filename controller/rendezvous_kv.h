// RendezvousKv: the key-value store ranks bootstrap their process groups on (c10d Store
// semantics: set, blocking get, add, wait, check, delete), one namespace per job run attempt.
//
// Keys live in memory and, given a Store, in SQLite too, so that a controller restart while
// ranks bootstrap costs them a retry, not the attempt: every change is written to the store
// before it becomes visible (a few writes per rank and process group, once per attempt; none
// while training), and Load brings back the keys of attempts whose run has not ended. A new
// attempt starts a fresh namespace; DropScope forgets one, in memory and in the store, when its
// run ends.
//
// Waits hold no thread: GetAsync and WaitAsync register a waiter under the first key it lacks
// and return; the change that sets that key moves it to the next one it lacks, or ends it.
// A change visits only the waiters of its own key, so an 80,000-rank job whose ranks all wait
// for rank 0's key costs one visit per rank when that key is set, not one per rank per change.
// One timer thread ends the waits whose timeout passes. Get and Wait are the blocking forms
// (for REST's threads and tests), built on the same waiters. Close ends every wait with
// UNAVAILABLE when the controller stops, and the rank's client re-issues it to the next
// controller.
//
// Retried calls: an Add or Delete with a request id remembers its answer (in memory, and in the
// store in the same transaction as its change) and answers a repeat of that id with it instead
// of applying it again, so a client that retries after a lost reply changes nothing twice. Set
// is idempotent; Get, Wait and Check change nothing.
//
// Thread-safety: all methods are thread-safe; mu_ guards the keys and the waiters. A wait's
// `done` runs outside mu_, once, on the thread that ended the wait: the caller's when the keys
// are there already or the request is refused, else the one that set the last missing key
// (Set, Add), the timer thread (timeout), DropScope's or Close's. It may call back in. The store
// is written under mu_ on the calling thread, so with a store the changing methods (Set, Add,
// Delete, DropScope, Load) must be called on the store's thread only (the controller's loop);
// the others on any.
#ifndef DHP_CONTROLLER_RENDEZVOUS_KV_H_
#define DHP_CONTROLLER_RENDEZVOUS_KV_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cancel_signal.h"
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
  // Waits in flight across all jobs. Each holds a gRPC call (a few KiB); a full 10,000-node
  // cluster's 80,000 ranks waiting at once use under a third. A wait past it ends at once with
  // RESOURCE_EXHAUSTED, so that the waits in flight cannot grow the controller without bound
  // (those a gRPC client gives up on end at once: GetAsync's `cancel`; REST's stay until
  // their timeout).
  static constexpr size_t kMaxWaits = 262144;

  // `store`: where changes are kept (borrowed; must outlive this); null: memory only.
  // `max_waits`: the limit on waits in flight (tests lower it).
  explicit RendezvousKv(Store* store = nullptr, size_t max_waits = kMaxWaits);
  // Closes (ending the waits in flight) and joins the timer thread.
  ~RendezvousKv();
  RendezvousKv(const RendezvousKv&) = delete;
  RendezvousKv& operator=(const RendezvousKv&) = delete;

  // How a wait ends: Get's value (empty for Wait), or why not.
  using WaitDone = std::function<void(absl::StatusOr<std::string>)>;

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
  // Get and Wait without blocking: `done` runs once, with what they would return (see the
  // thread-safety note above for where). `cancel` (may be null): its Cancel ends the wait at
  // once with CANCELLED and removes it (the client gave up), instead of at its timeout.
  void GetAsync(const KvScopeKey& scope, const std::string& key,
                std::chrono::milliseconds timeout, WaitDone done,
                std::shared_ptr<CancelSignal> cancel = nullptr);
  void WaitAsync(const KvScopeKey& scope, const std::vector<std::string>& keys,
                 std::chrono::milliseconds timeout, WaitDone done,
                 std::shared_ptr<CancelSignal> cancel = nullptr);
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
  // Waits in flight (registered, not yet ended).
  size_t Waiting();

 private:
  using Clock = std::chrono::steady_clock;
  using WatchKey = std::pair<KvScopeKey, std::string>;
  // One wait in flight: registered in watchers_ under keys[next], the first key it lacks.
  struct Waiter {
    KvScopeKey scope;
    std::vector<std::string> keys;
    bool get = false;  // Get: ends with keys[0]'s value
    size_t next = 0;   // keys before it were present when last looked at
    std::chrono::milliseconds timeout{0};
    std::multimap<Clock::time_point, uint64_t>::iterator expiry;
    WaitDone done;
  };
  // A wait that ended: its `done` and what it gets, run once mu_ is released.
  using Ended = std::vector<std::pair<WaitDone, absl::StatusOr<std::string>>>;

  // Registers a wait and runs what ended (it, when the keys are there or it is refused).
  void Start(const KvScopeKey& scope, std::vector<std::string> keys, bool get,
             std::chrono::milliseconds timeout, WaitDone done,
             std::shared_ptr<CancelSignal> cancel);
  // The wait's id while it is in flight; nothing when it ended here. mu_ held.
  std::optional<uint64_t> Register(Waiter waiter, Ended* ended);
  // Ends `id` with CANCELLED, if it is still in flight (its caller gave up).
  void Cancel(uint64_t id);
  // Moves `id` on to the next key it lacks, or ends it. mu_ held.
  void Advance(uint64_t id, Ended* ended);
  // Ends every wait for (scope, key), or moves it on. mu_ held.
  void NotifyLocked(const KvScopeKey& scope, const std::string& key, Ended* ended);
  // Removes `id` from the indexes and hands back its done. mu_ held.
  WaitDone Unregister(uint64_t id);
  void ExpireLoop();
  static void Run(Ended& ended);

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
  const size_t max_waits_;
  std::mutex mu_;  // guards everything below but timer_
  std::condition_variable timer_cv_;  // an earlier expiry, or closed_
  std::map<KvScopeKey, Scope> scopes_;
  std::map<uint64_t, Waiter> waiters_;  // by id
  std::map<WatchKey, std::set<uint64_t>> watchers_;  // the waits lacking each key
  std::multimap<Clock::time_point, uint64_t> expiries_;
  uint64_t next_id_ = 0;
  bool closed_ = false;
  std::thread timer_;  // ExpireLoop; last, started once the rest is built
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_RENDEZVOUS_KV_H_
