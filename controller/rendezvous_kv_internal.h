// What rendezvous_kv.cc and rendezvous_kv_waits.cc share: the checks and the wording of errors.
#ifndef DHP_CONTROLLER_RENDEZVOUS_KV_INTERNAL_H_
#define DHP_CONTROLLER_RENDEZVOUS_KV_INTERNAL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "controller/rendezvous_kv.h"

namespace dhp::controller::kv_internal {

// INVALID_ARGUMENT for an empty key or one over RendezvousKv::kMaxKeyBytes.
absl::Status CheckKey(const std::string& key);
// UNAVAILABLE: the controller is shutting down.
absl::Status Closed();
// "job J attempt N".
std::string ScopeName(const KvScopeKey& scope);
// "a", "b", ...
std::string JoinQuoted(const std::vector<std::string>& keys);

}  // namespace dhp::controller::kv_internal

#endif  // DHP_CONTROLLER_RENDEZVOUS_KV_INTERNAL_H_
