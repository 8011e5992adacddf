#include "worker/comm/in_memory_kv_client.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp::comm {
namespace {

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("key: must not be empty");
  return absl::OkStatus();
}

std::string JoinQuoted(const std::vector<std::string>& keys) {
  return absl::StrJoin(keys, ", ", [](std::string* out, const std::string& k) {
    absl::StrAppend(out, "\"", k, "\"");
  });
}

}  // namespace

absl::Status InMemoryKvClient::Set(const std::string& key, const std::string& value) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keys_[key] = value;
  }
  changed_.notify_all();
  return absl::OkStatus();
}

std::vector<std::string> InMemoryKvClient::MissingLocked(
    const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (keys_.count(k) == 0) missing.push_back(k);
  }
  return missing;
}

absl::Status InMemoryKvClient::Wait(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) {
  for (const std::string& k : keys) {
    if (absl::Status s = CheckKey(k); !s.ok()) return s;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    std::vector<std::string> missing = MissingLocked(keys);
    if (missing.empty()) return absl::OkStatus();
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      missing = MissingLocked(keys);
      if (missing.empty()) return absl::OkStatus();
      return absl::DeadlineExceededError(
          absl::StrCat("still missing ", JoinQuoted(missing), " after ", timeout.count(), " ms"));
    }
  }
}

absl::StatusOr<std::string> InMemoryKvClient::Get(const std::string& key,
                                                  std::chrono::milliseconds timeout) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (timeout.count() > 0) {
    if (absl::Status s = Wait({key}, timeout); !s.ok()) return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(key);
  if (it == keys_.end()) return absl::NotFoundError(absl::StrCat("key \"", key, "\" is not set"));
  return it->second;
}

absl::StatusOr<int64_t> InMemoryKvClient::Add(const std::string& key, int64_t delta) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string& slot = keys_[key];
    if (!slot.empty()) {
      char* end = nullptr;
      errno = 0;
      long long current = std::strtoll(slot.c_str(), &end, 10);
      if (errno != 0 || end == slot.c_str() || *end != '\0') {
        return absl::FailedPreconditionError(
            absl::StrCat("key \"", key, "\" holds a value that is not an integer"));
      }
      value = current;
    }
    value += delta;
    slot = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

absl::StatusOr<bool> InMemoryKvClient::Check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return MissingLocked(keys).empty();
}

absl::StatusOr<bool> InMemoryKvClient::Delete(const std::string& key) {
  bool erased = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    erased = keys_.erase(key) > 0;
  }
  changed_.notify_all();
  return erased;
}

size_t InMemoryKvClient::KeyCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.size();
}

std::vector<std::string> InMemoryKvClient::Keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, v] : keys_) out.push_back(k);
  return out;
}

}  // namespace dhp::comm
