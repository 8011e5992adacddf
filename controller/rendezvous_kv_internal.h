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
// "a", "b", ... for an error message: at most kMaxListedKeys keys, each cut to kMaxListedKeyBytes
// (at a UTF-8 boundary, with "..."), then "and N more", so that the message fits gRPC's
// metadata limit (16 KiB) however many keys a wait names.
inline constexpr size_t kMaxListedKeys = 8;
inline constexpr size_t kMaxListedKeyBytes = 100;
std::string JoinQuoted(const std::vector<std::string>& keys);

}  // namespace dhp::controller::kv_internal

#endif  // DHP_CONTROLLER_RENDEZVOUS_KV_INTERNAL_H_
