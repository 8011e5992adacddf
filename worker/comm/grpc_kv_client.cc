#include "worker/comm/grpc_kv_client.h"

#include <algorithm>
#include <utility>

namespace dhp::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline`, at most `cap`, never negative.
int32_t SliceMs(Clock::time_point deadline, std::chrono::milliseconds cap) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  left = std::clamp(left, std::chrono::milliseconds(0), cap);
  return static_cast<int32_t>(left.count());
}

}  // namespace

GrpcKvClient::GrpcKvClient(api::DhpClient& client, std::string job_id, int attempt,
                           std::chrono::milliseconds max_call_wait)
    : client_(client),
      job_id_(std::move(job_id)),
      attempt_(attempt),
      max_call_wait_(std::clamp(max_call_wait, std::chrono::milliseconds(1),
                                std::chrono::milliseconds(INT32_MAX))) {}

void GrpcKvClient::FillScope(v1::KvScope* scope) const {
  scope->set_job_id(job_id_);
  scope->set_attempt(attempt_);
}

absl::Status GrpcKvClient::Set(const std::string& key, const std::string& value) {
  v1::KvSetRequest req;
  FillScope(req.mutable_scope());
  req.set_key(key);
  req.set_value(value);
  return client_.KvSet(req).status();
}

absl::StatusOr<std::string> GrpcKvClient::Get(const std::string& key,
                                              std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  v1::KvGetRequest req;
  FillScope(req.mutable_scope());
  req.set_key(key);
  while (true) {
    req.set_timeout_ms(SliceMs(deadline, max_call_wait_));
    absl::StatusOr<v1::KvGetResponse> resp = client_.KvGet(req);
    if (resp.ok()) return std::move(*resp->mutable_value());
    if (!absl::IsDeadlineExceeded(resp.status()) || SliceMs(deadline, max_call_wait_) == 0) {
      return resp.status();
    }
  }
}

absl::StatusOr<int64_t> GrpcKvClient::Add(const std::string& key, int64_t delta) {
  v1::KvAddRequest req;
  FillScope(req.mutable_scope());
  req.set_key(key);
  req.set_delta(delta);
  absl::StatusOr<v1::KvAddResponse> resp = client_.KvAdd(req);
  if (!resp.ok()) return resp.status();
  return resp->value();
}

absl::Status GrpcKvClient::Wait(const std::vector<std::string>& keys,
                                std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  v1::KvWaitRequest req;
  FillScope(req.mutable_scope());
  for (const std::string& k : keys) req.add_keys(k);
  while (true) {
    req.set_timeout_ms(SliceMs(deadline, max_call_wait_));
    absl::StatusOr<v1::KvWaitResponse> resp = client_.KvWait(req);
    if (resp.ok()) return absl::OkStatus();
    if (!absl::IsDeadlineExceeded(resp.status()) || SliceMs(deadline, max_call_wait_) == 0) {
      return resp.status();
    }
  }
}

absl::StatusOr<bool> GrpcKvClient::Check(const std::vector<std::string>& keys) {
  v1::KvCheckRequest req;
  FillScope(req.mutable_scope());
  for (const std::string& k : keys) req.add_keys(k);
  absl::StatusOr<v1::KvCheckResponse> resp = client_.KvCheck(req);
  if (!resp.ok()) return resp.status();
  return resp->ready();
}

absl::StatusOr<bool> GrpcKvClient::Delete(const std::string& key) {
  v1::KvDeleteRequest req;
  FillScope(req.mutable_scope());
  req.set_key(key);
  absl::StatusOr<v1::KvDeleteResponse> resp = client_.KvDelete(req);
  if (!resp.ok()) return resp.status();
  return resp->deleted();
}

}  // namespace dhp::comm
