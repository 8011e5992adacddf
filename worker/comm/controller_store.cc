#include "worker/comm/controller_store.h"

#include <c10/util/Exception.h>

#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp::comm {
namespace {

std::string ToString(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> ToBytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Throws the c10::Error c10d callers expect, naming the store, operation and key.
[[noreturn]] void Fail(const std::string& prefix, const std::string& op, const std::string& what,
                       const absl::Status& status) {
  TORCH_CHECK(false, "ControllerStore \"", prefix, "\": ", op, " ", what, ": ", status.ToString());
  __builtin_unreachable();
}

std::string Quoted(const std::vector<std::string>& keys) {
  return absl::StrCat("[",
                      absl::StrJoin(keys, ", ",
                                    [](std::string* out, const std::string& k) {
                                      absl::StrAppend(out, "\"", k, "\"");
                                    }),
                      "]");
}

}  // namespace

ControllerStore::ControllerStore(KvClient& kv, std::string prefix,
                                 std::chrono::milliseconds timeout)
    : c10d::Store(timeout), kv_(kv), prefix_(std::move(prefix)) {}

std::chrono::milliseconds ControllerStore::Effective(std::chrono::milliseconds timeout) {
  if (timeout == c10d::Store::kNoTimeout) return std::chrono::hours(24 * 365);
  return timeout;
}

void ControllerStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  absl::Status s = kv_.Set(Full(key), ToString(value));
  if (!s.ok()) Fail(prefix_, "set", Quoted({key}), s);
}

std::vector<uint8_t> ControllerStore::get(const std::string& key) {
  absl::StatusOr<std::string> v = kv_.Get(Full(key), Effective(timeout_));
  if (!v.ok()) Fail(prefix_, "get", Quoted({key}), v.status());
  return ToBytes(*v);
}

int64_t ControllerStore::add(const std::string& key, int64_t value) {
  absl::StatusOr<int64_t> v = kv_.Add(Full(key), value);
  if (!v.ok()) Fail(prefix_, "add", Quoted({key}), v.status());
  return *v;
}

bool ControllerStore::deleteKey(const std::string& key) {
  absl::StatusOr<bool> v = kv_.Delete(Full(key));
  if (!v.ok()) Fail(prefix_, "deleteKey", Quoted({key}), v.status());
  return *v;
}

bool ControllerStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (const std::string& k : keys) full.push_back(Full(k));
  absl::StatusOr<bool> v = kv_.Check(full);
  if (!v.ok()) Fail(prefix_, "check", Quoted(keys), v.status());
  return *v;
}

int64_t ControllerStore::getNumKeys() {
  TORCH_CHECK(false, "ControllerStore \"", prefix_,
              "\": getNumKeys is not supported (the controller's KV is shared by every group of "
              "the run attempt and has no per-prefix count)");
  __builtin_unreachable();
}

void ControllerStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void ControllerStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  for (const std::string& k : keys) full.push_back(Full(k));
  absl::Status s = kv_.Wait(full, Effective(timeout));
  if (!s.ok()) Fail(prefix_, "wait for", Quoted(keys), s);
}

std::vector<uint8_t> ControllerStore::compareSet(const std::string& key,
                                                 const std::vector<uint8_t>& current_value,
                                                 const std::vector<uint8_t>& new_value) {
  // Spin lock on an add() counter: the caller whose increment returns 1 holds it.
  const std::string lock = Full(key) + "/cas_lock";
  const auto deadline = std::chrono::steady_clock::now() + Effective(timeout_);
  std::chrono::microseconds backoff(100);
  while (true) {
    absl::StatusOr<int64_t> n = kv_.Add(lock, 1);
    if (!n.ok()) Fail(prefix_, "compareSet (lock)", Quoted({key}), n.status());
    if (*n == 1) break;
    if (absl::StatusOr<int64_t> undo = kv_.Add(lock, -1); !undo.ok()) {
      Fail(prefix_, "compareSet (unlock)", Quoted({key}), undo.status());
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      Fail(prefix_, "compareSet", Quoted({key}),
           absl::DeadlineExceededError(
               absl::StrCat("lock \"", lock, "\" still held after ", timeout_.count(), " ms")));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(20000));
  }
  std::vector<uint8_t> result;
  absl::Status failure;
  absl::StatusOr<std::string> existing = kv_.Get(Full(key), std::chrono::milliseconds(0));
  if (existing.ok()) {
    if (ToBytes(*existing) == current_value) {
      failure = kv_.Set(Full(key), ToString(new_value));
      result = new_value;
    } else {
      result = ToBytes(*existing);
    }
  } else if (absl::IsNotFound(existing.status())) {
    // c10d (HashStore, TCPStore): an absent key is created only if the expected value is empty.
    if (current_value.empty()) {
      failure = kv_.Set(Full(key), ToString(new_value));
      result = new_value;
    } else {
      result = current_value;
    }
  } else {
    failure = existing.status();
  }
  absl::StatusOr<int64_t> unlock = kv_.Add(lock, -1);
  if (!failure.ok()) Fail(prefix_, "compareSet", Quoted({key}), failure);
  if (!unlock.ok()) Fail(prefix_, "compareSet (unlock)", Quoted({key}), unlock.status());
  return result;
}

c10::intrusive_ptr<c10d::Store> ControllerStore::clone() {
  return c10::make_intrusive<ControllerStore>(kv_, prefix_, timeout_);
}

}  // namespace dhp::comm
