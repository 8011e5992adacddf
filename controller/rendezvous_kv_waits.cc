// RendezvousKv's waits: registered under the first key they lack, moved on by the change that
// sets it, ended by the last one, a timeout (the timer thread), DropScope or Close.
#include <pthread.h>

#include <future>
#include <memory>
#include <utility>

#include "controller/rendezvous_kv.h"
#include "controller/rendezvous_kv_internal.h"

namespace dhp::controller {

using kv_internal::CheckKey;
using kv_internal::Closed;
using kv_internal::JoinQuoted;
using kv_internal::ScopeName;

RendezvousKv::RendezvousKv(Store* store, size_t max_waits)
    : store_(store), max_waits_(max_waits), timer_([this] { ExpireLoop(); }) {}

RendezvousKv::~RendezvousKv() {
  Close();
  timer_.join();
}

void RendezvousKv::Run(Ended& ended) {
  for (auto& [done, result] : ended) done(std::move(result));
}

void RendezvousKv::WaitAsync(const KvScopeKey& scope, const std::vector<std::string>& keys,
                             std::chrono::milliseconds timeout, WaitDone done,
                             std::shared_ptr<CancelSignal> cancel) {
  for (const std::string& k : keys) {
    if (absl::Status s = CheckKey(k); !s.ok()) return done(s);
  }
  Start(scope, keys, /*get=*/false, timeout, std::move(done), std::move(cancel));
}

void RendezvousKv::GetAsync(const KvScopeKey& scope, const std::string& key,
                            std::chrono::milliseconds timeout, WaitDone done,
                            std::shared_ptr<CancelSignal> cancel) {
  if (absl::Status s = CheckKey(key); !s.ok()) return done(s);
  if (timeout.count() <= 0) {  // no wait: the value or NOT_FOUND
    absl::StatusOr<std::string> result;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = scopes_.find(scope);
      if (closed_) {
        result = Closed();
      } else if (it == scopes_.end() || it->second.keys.count(key) == 0) {
        result = absl::NotFoundError("key \"" + key + "\" is not set in " + ScopeName(scope));
      } else {
        result = it->second.keys.at(key);
      }
    }
    return done(std::move(result));
  }
  Start(scope, {key}, /*get=*/true, timeout, std::move(done), std::move(cancel));
}

void RendezvousKv::Start(const KvScopeKey& scope, std::vector<std::string> keys, bool get,
                         std::chrono::milliseconds timeout, WaitDone done,
                         std::shared_ptr<CancelSignal> cancel) {
  Waiter waiter;
  waiter.scope = scope;
  waiter.keys = std::move(keys);
  waiter.get = get;
  waiter.timeout = timeout;
  waiter.done = std::move(done);
  if (cancel != nullptr) {  // however it ends, the signal no longer reaches this kv after
    waiter.done = [cancel, done = std::move(waiter.done)](absl::StatusOr<std::string> r) {
      cancel->Detach();
      done(std::move(r));
    };
  }
  Ended ended;
  std::optional<uint64_t> id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = Register(std::move(waiter), &ended);
  }
  Run(ended);
  // Outside mu_: a signal cancelled already runs the handler at once, and Cancel takes mu_.
  // A wait that ended in between has detached the signal, which then ignores this.
  if (id.has_value() && cancel != nullptr) cancel->OnCancel([this, id = *id] { Cancel(id); });
}

void RendezvousKv::Cancel(uint64_t id) {
  WaitDone done;
  absl::Status cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;  // ended meanwhile
    cancelled = absl::CancelledError("rendezvous of " + ScopeName(it->second.scope) +
                                     ": the caller cancelled the wait for " +
                                     JoinQuoted(MissingLocked(it->second.scope,
                                                              it->second.keys)));
    done = Unregister(id);
  }
  done(cancelled);
}

namespace {

// Blocks until `start(done)` has called `done`, and returns what it was given.
absl::StatusOr<std::string> Await(
    const std::function<void(RendezvousKv::WaitDone)>& start) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
  std::future<absl::StatusOr<std::string>> result = promise->get_future();
  start([promise](absl::StatusOr<std::string> r) { promise->set_value(std::move(r)); });
  return result.get();
}

}  // namespace

absl::Status RendezvousKv::Wait(const KvScopeKey& scope, const std::vector<std::string>& keys,
                                std::chrono::milliseconds timeout) {
  return Await([&](WaitDone done) { WaitAsync(scope, keys, timeout, std::move(done)); })
      .status();
}

absl::StatusOr<std::string> RendezvousKv::Get(const KvScopeKey& scope, const std::string& key,
                                              std::chrono::milliseconds timeout) {
  return Await([&](WaitDone done) { GetAsync(scope, key, timeout, std::move(done)); });
}

std::optional<uint64_t> RendezvousKv::Register(Waiter waiter, Ended* ended) {
  if (closed_) {
    ended->emplace_back(std::move(waiter.done), Closed());
    return std::nullopt;
  }
  const uint64_t id = next_id_++;
  const std::chrono::milliseconds timeout = waiter.timeout;
  auto it = waiters_.emplace(id, std::move(waiter)).first;
  it->second.expiry = expiries_.end();
  Advance(id, ended);
  if (waiters_.count(id) == 0) return std::nullopt;  // the keys were there
  // What ends it here is worded before Unregister, which destroys the waiter.
  const Waiter& w = it->second;
  if (waiters_.size() > max_waits_) {
    absl::Status full = absl::ResourceExhaustedError(
        "rendezvous of " + ScopeName(w.scope) + ": the controller holds " +
        std::to_string(max_waits_) +
        " waits in flight already (its limit, over all jobs); retry once some have ended");
    ended->emplace_back(Unregister(id), std::move(full));
    return std::nullopt;
  }
  if (timeout.count() <= 0) {  // no wait: what is missing, at once
    absl::Status missing = absl::DeadlineExceededError(
        "rendezvous of " + ScopeName(w.scope) + ": still missing " +
        JoinQuoted(MissingLocked(w.scope, w.keys)) + " after 0 ms");
    ended->emplace_back(Unregister(id), std::move(missing));
    return std::nullopt;
  }
  const bool earliest = expiries_.empty() || Clock::now() + timeout < expiries_.begin()->first;
  it->second.expiry = expiries_.emplace(Clock::now() + timeout, id);
  if (earliest) timer_cv_.notify_one();
  return id;
}

void RendezvousKv::Advance(uint64_t id, Ended* ended) {
  Waiter& w = waiters_.at(id);
  auto scope = scopes_.find(w.scope);
  auto has = [&](const std::string& key) {
    return scope != scopes_.end() && scope->second.keys.count(key) > 0;
  };
  while (w.next < w.keys.size() && has(w.keys[w.next])) ++w.next;
  if (w.next == w.keys.size()) {  // a key seen earlier may have been deleted since
    for (size_t i = 0; i < w.keys.size(); ++i) {
      if (!has(w.keys[i])) {
        w.next = i;
        break;
      }
    }
  }
  if (w.next < w.keys.size()) {
    watchers_[WatchKey{w.scope, w.keys[w.next]}].insert(id);
    return;
  }
  absl::StatusOr<std::string> result =
      w.get ? scope->second.keys.at(w.keys[0]) : std::string();
  ended->emplace_back(Unregister(id), std::move(result));
}

void RendezvousKv::NotifyLocked(const KvScopeKey& scope, const std::string& key,
                                Ended* ended) {
  auto it = watchers_.find(WatchKey{scope, key});
  if (it == watchers_.end()) return;
  const std::set<uint64_t> ids = std::move(it->second);
  watchers_.erase(it);
  for (uint64_t id : ids) Advance(id, ended);
}

RendezvousKv::WaitDone RendezvousKv::Unregister(uint64_t id) {
  auto it = waiters_.find(id);
  Waiter& w = it->second;
  if (w.next < w.keys.size()) {
    auto watching = watchers_.find(WatchKey{w.scope, w.keys[w.next]});
    if (watching != watchers_.end()) {
      watching->second.erase(id);
      if (watching->second.empty()) watchers_.erase(watching);
    }
  }
  if (w.expiry != expiries_.end()) expiries_.erase(w.expiry);
  WaitDone done = std::move(w.done);
  waiters_.erase(it);
  return done;
}

void RendezvousKv::ExpireLoop() {
  pthread_setname_np(pthread_self(), "dhp-kv-timer");
  std::unique_lock<std::mutex> lock(mu_);
  while (!closed_) {
    if (expiries_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    const Clock::time_point first = expiries_.begin()->first;
    if (Clock::now() < first) {
      timer_cv_.wait_until(lock, first);
      continue;
    }
    Ended ended;
    const Clock::time_point now = Clock::now();
    while (!expiries_.empty() && expiries_.begin()->first <= now) {
      const uint64_t id = expiries_.begin()->second;
      const Waiter& w = waiters_.at(id);
      std::string message = "rendezvous of " + ScopeName(w.scope) + ": still missing " +
                            JoinQuoted(MissingLocked(w.scope, w.keys)) + " after " +
                            std::to_string(w.timeout.count()) + " ms";
      ended.emplace_back(Unregister(id), absl::DeadlineExceededError(std::move(message)));
    }
    lock.unlock();
    Run(ended);
    lock.lock();
  }
}

absl::Status RendezvousKv::DropScope(const KvScopeKey& scope) {
  absl::Status stored;
  Ended ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (store_ != nullptr) stored = store_->DeleteKvScope(scope.job_id, scope.attempt);
    std::vector<uint64_t> ids;
    for (auto it = watchers_.lower_bound(WatchKey{scope, ""});
         it != watchers_.end() && !(scope < it->first.first); ++it) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
    }
    for (uint64_t id : ids) {
      const Waiter& w = waiters_.at(id);
      std::string message = "rendezvous of " + ScopeName(scope) + " was closed while waiting for " +
                            JoinQuoted(MissingLocked(scope, w.keys));
      ended.emplace_back(Unregister(id), absl::CancelledError(std::move(message)));
    }
    scopes_.erase(scope);
  }
  Run(ended);
  return stored;
}

void RendezvousKv::Close() {
  Ended ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (auto& [id, w] : waiters_) ended.emplace_back(std::move(w.done), Closed());
    waiters_.clear();
    watchers_.clear();
    expiries_.clear();
  }
  timer_cv_.notify_all();
  Run(ended);
}

size_t RendezvousKv::Waiting() {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_.size();
}

}  // namespace dhp::controller
