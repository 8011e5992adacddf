// InFlightRegistry: which collectives this process is inside right now, for the rank's watchdog
// (worker/rank/rank_reporter.h), which names the oldest one when a step stalls, e.g.
// "all_reduce on group text.tp0 (call 57) for 31 s".
//
// ProcessGroupCommunicator registers every collective it issues (InFlightScope) from the moment
// it is issued until the backend's wait() returns, successfully or not. Entries carry the group
// name, the operation name (comm_stats.h's kOp* strings), the call number (the n-th call of that
// operation on that communicator, counting from 1: CommStats' count for (group, op) + 1 while
// every earlier call succeeded) and the start time (steady clock).
//
// One registry per process (Global()), because the communicators that register and the reporter
// that reads are created far apart (process_groups.cc, the rank's main); tests may make their own.
// Pure C++ (no LibTorch), so the reporter links it cheaply.
//
// Thread-safety: InFlightRegistry is thread-safe (mu_ guards next_ and ops_); Begin/End are a
// lock and a map insert/erase, cheap next to any collective. An InFlightScope belongs to the
// thread that made it.
#ifndef DHP_WORKER_COMM_INFLIGHT_H_
#define DHP_WORKER_COMM_INFLIGHT_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dhp::comm {

struct InFlightOp {
  std::string group;  // e.g. "text.tp0"
  std::string op;     // e.g. "all_reduce"
  int64_t call = 0;   // 1-based, per (group, op)
  int peer = -1;      // send / recv: the peer's rank in the group; -1 otherwise
  std::chrono::steady_clock::time_point start;
};

// "all_reduce on group text.tp0 (call 57) for 31 s"; send / recv name the peer
// ("recv from rank 1 on group world (call 4) for 2.5 s"). Durations under 10 s get one decimal.
std::string Describe(const InFlightOp& op, std::chrono::steady_clock::time_point now);

class InFlightRegistry {
 public:
  using Token = uint64_t;  // 0 is never handed out: "nothing registered"

  // The process-wide registry (never destroyed, so threads may use it during exit).
  static InFlightRegistry& Global();

  // Registers an operation starting now.
  Token Begin(std::string group, std::string op, int64_t call, int peer = -1);
  // Registers `op` as given (its start time included).
  Token Begin(InFlightOp op);
  // Unregisters; unknown tokens (and 0) are ignored.
  void End(Token token);

  // The registered operation with the earliest start (the first begun among equal starts).
  std::optional<InFlightOp> Oldest() const;
  // Everything registered, oldest first.
  std::vector<InFlightOp> Snapshot() const;
  size_t size() const;

 private:
  mutable std::mutex mu_;  // guards next_ and ops_
  Token next_ = 1;
  std::map<Token, InFlightOp> ops_;  // by token, i.e. in Begin order
};

// Registers an operation for the lifetime of the scope. A null registry makes it a no-op.
class InFlightScope {
 public:
  InFlightScope(InFlightRegistry* registry, std::string group, std::string op, int64_t call,
                int peer = -1)
      : registry_(registry),
        token_(registry == nullptr
                   ? 0
                   : registry->Begin(std::move(group), std::move(op), call, peer)) {}
  ~InFlightScope() {
    if (registry_ != nullptr) registry_->End(token_);
  }
  InFlightScope(const InFlightScope&) = delete;
  InFlightScope& operator=(const InFlightScope&) = delete;

 private:
  InFlightRegistry* const registry_;
  const InFlightRegistry::Token token_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_INFLIGHT_H_
