#include "worker/comm/grpc_kv_client.h"

#include <algorithm>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dhp::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline`, at most `cap`, never negative.
int32_t SliceMs(Clock::time_point deadline, std::chrono::milliseconds cap) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  left = std::clamp(left, std::chrono::milliseconds(0), cap);
  return static_cast<int32_t>(left.count());
}

// The wait to ask of the controller: what is left until `deadline` (at most `cap`), and at
// least 1 ms when the caller asked to wait at all, so that a wait re-issued after its deadline
// (the controller was down meanwhile) still ends with DEADLINE_EXCEEDED naming the keys.
int32_t WaitMs(Clock::time_point deadline, std::chrono::milliseconds timeout,
               std::chrono::milliseconds cap) {
  const int32_t ms = SliceMs(deadline, cap);
  return timeout.count() > 0 ? std::max(ms, 1) : ms;
}

// Runs `call` (one RPC) until it answers something other than UNAVAILABLE or `until` has
// passed, sleeping with exponential backoff between tries; returns the last answer.
template <typename Call>
auto RetryUnavailable(const GrpcKvClientOptions& options, Clock::time_point until,
                      const Call& call) -> decltype(call()) {
  std::chrono::milliseconds backoff = options.initial_backoff;
  while (true) {
    auto result = call();
    if (result.ok() || !absl::IsUnavailable(result.status())) return result;
    const Clock::time_point now = Clock::now();
    if (now >= until) return result;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, until - now));
    backoff = std::min(backoff * 2, options.max_backoff);
  }
}

std::string RandomClientId() {
  std::random_device random;
  const uint64_t id = (static_cast<uint64_t>(random()) << 32) ^ random();
  return absl::StrCat(absl::Hex(id, absl::kZeroPad16));
}

}  // namespace

GrpcKvClient::GrpcKvClient(api::DhpClient& client, std::string job_id, int attempt,
                           GrpcKvClientOptions options)
    : client_(client),
      job_id_(std::move(job_id)),
      attempt_(attempt),
      options_([&] {
        options.max_call_wait = std::clamp(options.max_call_wait, std::chrono::milliseconds(1),
                                           std::chrono::milliseconds(INT32_MAX));
        options.initial_backoff = std::max(options.initial_backoff, std::chrono::milliseconds(1));
        options.max_backoff = std::max(options.max_backoff, options.initial_backoff);
        return options;
      }()),
      client_id_(RandomClientId()) {}

void GrpcKvClient::FillScope(v1::KvScope* scope) const {
  scope->set_job_id(job_id_);
  scope->set_attempt(attempt_);
}

std::string GrpcKvClient::NextRequestId() {
  return absl::StrCat(client_id_, "-", next_request_.fetch_add(1));
}

absl::Status GrpcKvClient::Set(const std::string& key, const std::string& value) {
  v1::KvSetRequest req;
  FillScope(req.mutable_scope());
  req.set_key(key);
  req.set_value(value);
  return RetryUnavailable(options_, Clock::now() + options_.retry_for,
                          [&] { return client_.KvSet(req); })
      .status();
}

absl::StatusOr<std::string> GrpcKvClient::Get(const std::string& key,
                                              std::chrono::milliseconds timeout) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  const Clock::time_point retry_until = std::max(deadline, start + options_.retry_for);
  v1::KvGetRequest req;
  FillScope(req.mutable_scope());
  req.set_key(key);
  while (true) {
    absl::StatusOr<v1::KvGetResponse> resp = RetryUnavailable(options_, retry_until, [&] {
      req.set_timeout_ms(WaitMs(deadline, timeout, options_.max_call_wait));
      return client_.KvGet(req);
    });
    if (resp.ok()) return std::move(*resp->mutable_value());
    if (!absl::IsDeadlineExceeded(resp.status()) ||
        SliceMs(deadline, options_.max_call_wait) == 0) {
      return resp.status();
    }
  }
}

absl::StatusOr<int64_t> GrpcKvClient::Add(const std::string& key, int64_t delta) {
  v1::KvAddRequest req;
  FillScope(req.mutable_scope());
  req.set_key(key);
  req.set_delta(delta);
  req.set_request_id(NextRequestId());  // the same for every retry: applied once
  absl::StatusOr<v1::KvAddResponse> resp = RetryUnavailable(
      options_, Clock::now() + options_.retry_for, [&] { return client_.KvAdd(req); });
  if (!resp.ok()) return resp.status();
  return resp->value();
}

absl::Status GrpcKvClient::Wait(const std::vector<std::string>& keys,
                                std::chrono::milliseconds timeout) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  const Clock::time_point retry_until = std::max(deadline, start + options_.retry_for);
  v1::KvWaitRequest req;
  FillScope(req.mutable_scope());
  for (const std::string& k : keys) req.add_keys(k);
  while (true) {
    absl::StatusOr<v1::KvWaitResponse> resp = RetryUnavailable(options_, retry_until, [&] {
      req.set_timeout_ms(WaitMs(deadline, timeout, options_.max_call_wait));
      return client_.KvWait(req);
    });
    if (resp.ok()) return absl::OkStatus();
    if (!absl::IsDeadlineExceeded(resp.status()) ||
        SliceMs(deadline, options_.max_call_wait) == 0) {
      return resp.status();
    }
  }
}

absl::StatusOr<bool> GrpcKvClient::Check(const std::vector<std::string>& keys) {
  v1::KvCheckRequest req;
  FillScope(req.mutable_scope());
  for (const std::string& k : keys) req.add_keys(k);
  absl::StatusOr<v1::KvCheckResponse> resp = RetryUnavailable(
      options_, Clock::now() + options_.retry_for, [&] { return client_.KvCheck(req); });
  if (!resp.ok()) return resp.status();
  return resp->ready();
}

absl::StatusOr<bool> GrpcKvClient::Delete(const std::string& key) {
  v1::KvDeleteRequest req;
  FillScope(req.mutable_scope());
  req.set_key(key);
  req.set_request_id(NextRequestId());  // the same for every retry: answered as the first
  absl::StatusOr<v1::KvDeleteResponse> resp = RetryUnavailable(
      options_, Clock::now() + options_.retry_for, [&] { return client_.KvDelete(req); });
  if (!resp.ok()) return resp.status();
  return resp->deleted();
}

}  // namespace dhp::comm
