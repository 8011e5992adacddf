#include "controller/rendezvous_kv.h"

#include <cerrno>
#include <cstdlib>

namespace dhp::controller {
namespace {

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("key: must not be empty");
  if (key.size() > RendezvousKv::kMaxKeyBytes) {
    return absl::InvalidArgumentError("key: " + std::to_string(key.size()) +
                                      " bytes exceeds the limit of " +
                                      std::to_string(RendezvousKv::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

std::string ScopeName(const KvScopeKey& scope) {
  return "job " + scope.job_id + " attempt " + std::to_string(scope.attempt);
}

std::string JoinQuoted(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) {
    if (!out.empty()) out += ", ";
    out += "\"" + k + "\"";
  }
  return out;
}

}  // namespace

absl::Status RendezvousKv::Set(const KvScopeKey& scope, const std::string& key,
                               const std::string& value) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError("value: " + std::to_string(value.size()) +
                                      " bytes exceeds the limit of " +
                                      std::to_string(kMaxValueBytes));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    scopes_[scope][key] = value;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

std::vector<std::string> RendezvousKv::MissingLocked(const KvScopeKey& scope,
                                                     const std::vector<std::string>& keys) {
  std::vector<std::string> missing;
  auto it = scopes_.find(scope);
  for (const std::string& k : keys) {
    if (it == scopes_.end() || it->second.count(k) == 0) missing.push_back(k);
  }
  return missing;
}

absl::Status RendezvousKv::Wait(const KvScopeKey& scope, const std::vector<std::string>& keys,
                                std::chrono::milliseconds timeout) {
  for (const std::string& k : keys) {
    if (absl::Status s = CheckKey(k); !s.ok()) return s;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t generation = dropped_generation_;
  while (true) {
    std::vector<std::string> missing = MissingLocked(scope, keys);
    if (missing.empty()) return absl::OkStatus();
    if (dropped_generation_ != generation && scopes_.count(scope) == 0) {
      return absl::CancelledError("rendezvous of " + ScopeName(scope) +
                                  " was closed while waiting for " + JoinQuoted(missing));
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      missing = MissingLocked(scope, keys);
      if (missing.empty()) return absl::OkStatus();
      return absl::DeadlineExceededError(
          "rendezvous of " + ScopeName(scope) + ": still missing " + JoinQuoted(missing) +
          " after " + std::to_string(timeout.count()) + " ms");
    }
  }
}

absl::StatusOr<std::string> RendezvousKv::Get(const KvScopeKey& scope, const std::string& key,
                                              std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) {
    if (absl::Status s = Wait(scope, {key}, timeout); !s.ok()) return s;
  } else if (absl::Status s = CheckKey(key); !s.ok()) {
    return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = scopes_.find(scope);
  if (it == scopes_.end() || it->second.count(key) == 0) {
    return absl::NotFoundError("key \"" + key + "\" is not set in " + ScopeName(scope));
  }
  return it->second[key];
}

absl::StatusOr<int64_t> RendezvousKv::Add(const KvScopeKey& scope, const std::string& key,
                                          int64_t delta) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string& slot = scopes_[scope][key];
    if (!slot.empty()) {
      char* end = nullptr;
      errno = 0;
      long long current = std::strtoll(slot.c_str(), &end, 10);
      if (errno != 0 || end == slot.c_str() || *end != '\0') {
        return absl::FailedPreconditionError("key \"" + key + "\" in " + ScopeName(scope) +
                                             " holds a value that is not an integer");
      }
      value = current;
    }
    value += delta;
    slot = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

bool RendezvousKv::Check(const KvScopeKey& scope, const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return MissingLocked(scope, keys).empty();
}

bool RendezvousKv::Delete(const KvScopeKey& scope, const std::string& key) {
  bool erased = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = scopes_.find(scope);
    if (it != scopes_.end()) erased = it->second.erase(key) > 0;
  }
  changed_.notify_all();
  return erased;
}

void RendezvousKv::DropScope(const KvScopeKey& scope) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    scopes_.erase(scope);
    ++dropped_generation_;
  }
  changed_.notify_all();
}

size_t RendezvousKv::KeyCount(const KvScopeKey& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = scopes_.find(scope);
  return it == scopes_.end() ? 0 : it->second.size();
}

}  // namespace dhp::controller
