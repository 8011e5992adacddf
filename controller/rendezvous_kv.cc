#include "controller/rendezvous_kv.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <string_view>

#include "controller/rendezvous_kv_internal.h"

namespace dhp::controller {
namespace kv_internal {

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("key: must not be empty");
  if (key.size() > RendezvousKv::kMaxKeyBytes) {
    return absl::InvalidArgumentError("key: " + std::to_string(key.size()) +
                                      " bytes exceeds the limit of " +
                                      std::to_string(RendezvousKv::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Status Closed() { return absl::UnavailableError("the controller is shutting down"); }

std::string ScopeName(const KvScopeKey& scope) {
  return "job " + scope.job_id + " attempt " + std::to_string(scope.attempt);
}

std::string JoinQuoted(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kMaxListedKeys; ++i) {
    const std::string& k = keys[i];
    size_t cut = std::min(k.size(), kMaxListedKeyBytes);
    while (cut < k.size() && cut > 0 && (static_cast<unsigned char>(k[cut]) & 0xC0) == 0x80) {
      --cut;  // not inside a UTF-8 sequence
    }
    if (!out.empty()) out += ", ";
    out += "\"" + k.substr(0, cut) + (cut < k.size() ? "...\"" : "\"");
  }
  if (keys.size() > kMaxListedKeys) {
    out += " and " + std::to_string(keys.size() - kMaxListedKeys) + " more";
  }
  return out;
}

}  // namespace kv_internal

namespace {

using kv_internal::CheckKey;
using kv_internal::Closed;
using kv_internal::ScopeName;

absl::Status CheckRequestId(const std::string& request_id) {
  if (request_id.size() <= RendezvousKv::kMaxRequestIdBytes) return absl::OkStatus();
  return absl::InvalidArgumentError("request_id: " + std::to_string(request_id.size()) +
                                    " bytes exceeds the limit of " +
                                    std::to_string(RendezvousKv::kMaxRequestIdBytes));
}

}  // namespace

absl::Status RendezvousKv::Load() {
  if (store_ == nullptr) return absl::OkStatus();
  absl::StatusOr<std::vector<StoredKvScope>> stored = store_->LoadKv();
  if (!stored.ok()) return stored.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (StoredKvScope& s : *stored) {
      Scope& scope = scopes_[KvScopeKey{s.job_id, s.attempt}];
      scope.keys.merge(s.keys);
      scope.replies.merge(s.replies);
    }
  }
  return absl::OkStatus();  // before serving: no wait is in flight
}

absl::Status RendezvousKv::PersistLocked(const KvScopeKey& scope, const std::string& key,
                                         std::optional<std::string> value,
                                         const std::string& request_id, int64_t reply) {
  if (store_ == nullptr) return absl::OkStatus();
  KvWrite write;
  write.job_id = scope.job_id;
  write.attempt = scope.attempt;
  write.key = key;
  write.value = std::move(value);
  write.request_id = request_id;
  write.reply = reply;
  return store_->WriteKv(write);
}

absl::Status RendezvousKv::Set(const KvScopeKey& scope, const std::string& key,
                               const std::string& value) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError("value: " + std::to_string(value.size()) +
                                      " bytes exceeds the limit of " +
                                      std::to_string(kMaxValueBytes));
  }
  Ended ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Closed();
    auto it = scopes_.find(scope);
    if (it != scopes_.end()) {
      auto k = it->second.keys.find(key);
      if (k != it->second.keys.end() && k->second == value) return absl::OkStatus();  // a retry
    }
    if (absl::Status s = PersistLocked(scope, key, value, "", 0); !s.ok()) return s;
    scopes_[scope].keys[key] = value;
    NotifyLocked(scope, key, &ended);
  }
  Run(ended);
  return absl::OkStatus();
}

std::vector<std::string> RendezvousKv::MissingLocked(const KvScopeKey& scope,
                                                     const std::vector<std::string>& keys) {
  std::vector<std::string> missing;
  std::set<std::string_view> named;  // a key asked for twice is named once
  auto it = scopes_.find(scope);
  for (const std::string& k : keys) {
    if (it != scopes_.end() && it->second.keys.count(k) > 0) continue;
    if (named.insert(k).second) missing.push_back(k);
  }
  return missing;
}

absl::StatusOr<int64_t> RendezvousKv::Add(const KvScopeKey& scope, const std::string& key,
                                          int64_t delta, const std::string& request_id) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (absl::Status s = CheckRequestId(request_id); !s.ok()) return s;
  int64_t value = 0;
  Ended ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Closed();
    auto it = scopes_.find(scope);
    if (it != scopes_.end()) {
      if (!request_id.empty()) {
        auto reply = it->second.replies.find(request_id);
        if (reply != it->second.replies.end()) return reply->second;  // a retry: added already
      }
      auto k = it->second.keys.find(key);
      if (k != it->second.keys.end() && !k->second.empty()) {
        const std::string& slot = k->second;
        char* end = nullptr;
        errno = 0;
        long long current = std::strtoll(slot.c_str(), &end, 10);
        if (errno != 0 || end == slot.c_str() || *end != '\0') {
          return absl::FailedPreconditionError("key \"" + key + "\" in " + ScopeName(scope) +
                                               " holds a value that is not an integer");
        }
        value = current;
      }
    }
    value += delta;
    if (absl::Status s = PersistLocked(scope, key, std::to_string(value), request_id, value);
        !s.ok()) {
      return s;
    }
    Scope& stored = scopes_[scope];
    stored.keys[key] = std::to_string(value);
    if (!request_id.empty()) stored.replies[request_id] = value;
    NotifyLocked(scope, key, &ended);
  }
  Run(ended);
  return value;
}

bool RendezvousKv::Check(const KvScopeKey& scope, const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return MissingLocked(scope, keys).empty();
}

absl::StatusOr<bool> RendezvousKv::Delete(const KvScopeKey& scope, const std::string& key,
                                          const std::string& request_id) {
  if (absl::Status s = CheckRequestId(request_id); !s.ok()) return s;
  bool existed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Closed();
    auto it = scopes_.find(scope);
    if (it != scopes_.end() && !request_id.empty()) {
      auto reply = it->second.replies.find(request_id);
      if (reply != it->second.replies.end()) return reply->second != 0;  // a retry
    }
    existed = it != scopes_.end() && it->second.keys.count(key) > 0;
    if (!existed && request_id.empty()) return false;  // nothing to change or remember
    if (absl::Status s = PersistLocked(scope, key, std::nullopt, request_id, existed ? 1 : 0);
        !s.ok()) {
      return s;
    }
    Scope& stored = scopes_[scope];
    stored.keys.erase(key);
    if (!request_id.empty()) stored.replies[request_id] = existed ? 1 : 0;
  }
  return existed;  // a key removed satisfies no wait
}

size_t RendezvousKv::KeyCount(const KvScopeKey& scope) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = scopes_.find(scope);
  return it == scopes_.end() ? 0 : it->second.keys.size();
}

}  // namespace dhp::controller
