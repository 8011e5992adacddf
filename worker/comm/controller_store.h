// ControllerStore: a c10d::Store on a KvClient (in production the controller's rendezvous KV),
// so that ProcessGroupGloo/NCCL bootstrap through the controller: it sees who joined, and a
// missing rank becomes an error naming it instead of a hang.
//
// Every key is stored as "<prefix><key>" (prefix e.g. "text.tp0/store/"), so the groups of one
// run attempt share the KV without collisions. Values are bytes.
//
// Semantics (c10d's): get() and wait(keys) block up to the store timeout (getTimeout(); c10d's
// kNoTimeout = 0 means wait without limit); add() treats an absent key as 0; check() does not
// block; deleteKey() returns whether the key existed. getNumKeys() is unsupported (the KV
// namespace is shared by all groups, so a per-prefix count is not available): it throws.
// compareSet() is serialised by a lock key "<prefix><key>/cas_lock" taken with add(): atomic
// with respect to other compareSet() calls on the same key (any process), NOT with respect to a
// concurrent plain set() of that key. A holder that dies while holding the lock makes later
// compareSet() calls of that key time out. Nothing in Gloo/NCCL bootstrap uses compareSet.
//
// Failures throw c10::Error (that is the c10d contract) whose message names the prefix, the
// operation, the key(s) and the KV's status, e.g. a wait timeout lists the keys still missing.
//
// Thread-safety: thread-safe if the KvClient is (it must be). The KvClient is borrowed and must
// outlive the store and every process group built on it.
#ifndef DHP_WORKER_COMM_CONTROLLER_STORE_H_
#define DHP_WORKER_COMM_CONTROLLER_STORE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "worker/comm/kv_client.h"

namespace dhp::comm {

class ControllerStore : public c10d::Store {
 public:
  ControllerStore(KvClient& kv, std::string prefix,
                  std::chrono::milliseconds timeout = c10d::Store::kDefaultTimeout);

  const std::string& prefix() const { return prefix_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& current_value,
                                  const std::vector<uint8_t>& new_value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // A store on the same KV, prefix and timeout. Pure virtual in LibTorch 2.x's c10d::Store (it
  // overrides there), a plain virtual on 1.13; hence no `override`.
  virtual c10::intrusive_ptr<c10d::Store> clone();

 private:
  std::string Full(const std::string& key) const { return prefix_ + key; }
  // c10d's "no timeout" (0) as a finite, very long wait.
  static std::chrono::milliseconds Effective(std::chrono::milliseconds timeout);

  KvClient& kv_;
  const std::string prefix_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_CONTROLLER_STORE_H_
