#include "worker/comm/inflight.h"

#include <algorithm>
#include <cstdio>

namespace dhp::comm {

std::string Describe(const InFlightOp& op, std::chrono::steady_clock::time_point now) {
  std::string out = op.op;
  if (op.peer >= 0) {
    const char* dir = op.op == "send" ? " to rank " : op.op == "recv" ? " from rank " : " with rank ";
    out += dir + std::to_string(op.peer);
  }
  out += " on group " + op.group + " (call " + std::to_string(op.call) + ") for ";
  const double secs =
      now > op.start ? std::chrono::duration<double>(now - op.start).count() : 0.0;
  char buf[32];
  if (secs < 10) {
    std::snprintf(buf, sizeof(buf), "%.1f s", secs);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld s", static_cast<long long>(secs));
  }
  return out + buf;
}

InFlightRegistry& InFlightRegistry::Global() {
  static InFlightRegistry* const global = new InFlightRegistry();
  return *global;
}

InFlightRegistry::Token InFlightRegistry::Begin(std::string group, std::string op, int64_t call,
                                                int peer) {
  InFlightOp entry;
  entry.group = std::move(group);
  entry.op = std::move(op);
  entry.call = call;
  entry.peer = peer;
  entry.start = std::chrono::steady_clock::now();
  return Begin(std::move(entry));
}

InFlightRegistry::Token InFlightRegistry::Begin(InFlightOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  const Token token = next_++;
  ops_.emplace(token, std::move(op));
  return token;
}

void InFlightRegistry::End(Token token) {
  if (token == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  ops_.erase(token);
}

std::optional<InFlightOp> InFlightRegistry::Oldest() const {
  std::lock_guard<std::mutex> lock(mu_);
  const InFlightOp* oldest = nullptr;
  for (const auto& [token, op] : ops_) {
    if (oldest == nullptr || op.start < oldest->start) oldest = &op;
  }
  if (oldest == nullptr) return std::nullopt;
  return *oldest;
}

std::vector<InFlightOp> InFlightRegistry::Snapshot() const {
  std::vector<InFlightOp> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(ops_.size());
    for (const auto& [token, op] : ops_) out.push_back(op);
  }
  // Stable: equal starts keep Begin order.
  std::stable_sort(out.begin(), out.end(),
                   [](const InFlightOp& a, const InFlightOp& b) { return a.start < b.start; });
  return out;
}

size_t InFlightRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_.size();
}

}  // namespace dhp::comm
