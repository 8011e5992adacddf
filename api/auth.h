// TokenAuth: who is calling the controller's API, from the bearer token of a call.
//
// Callers carry `authorization: Bearer <token>`. A token names one identity:
//   * the admin token (--auth-token-file): role admin, may do anything;
//   * a user's token (auth.users in the controller's config, stored as its SHA-256): role
//     admin, user (submit; see, cancel and resume their own jobs) or viewer (read only);
//   * a node's token (auth.nodes, SHA-256): the agent of that one node id;
//   * a rank token, minted by the controller for one job and run attempt and handed to the
//     agent in the heartbeat's launch list ("rank.<job>.<attempt>.<HMAC-SHA256 hex>", keyed
//     with the controller's rank key, so it stays valid across controller restarts).
// What each identity may call is api/authz.h's business. /healthz, /metrics and
// /openapi.json stay open so that probes and Prometheus need no secret. With no credential
// configured, everything is open and every caller is an admin without a name (the default,
// safe because the controller listens on loopback unless told otherwise).
//
// Thread-safe (immutable after construction); cheap to copy (the state is shared).
#ifndef DHP_API_AUTH_H_
#define DHP_API_AUTH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dhp::api {

enum class Role { kAdmin, kUser, kViewer, kNode, kRank };

// "admin", "user", "viewer", "node", "rank".
std::string_view RoleName(Role role);
// A role a user may be given: admin, user or viewer. INVALID_ARGUMENT naming the choices.
absl::StatusOr<Role> ParseUserRole(std::string_view name);

struct Identity {
  Role role = Role::kAdmin;
  std::string name;    // the user's name, the node id, or "<job>/<attempt>" for a rank
  std::string job_id;  // kRank: the job and attempt the credential is for
  int32_t attempt = 0;
};

struct UserCredential {
  std::string name;
  Role role = Role::kUser;
  std::string token_sha256;  // 64 hex digits
};

struct NodeCredential {
  std::string node_id;
  std::string token_sha256;  // 64 hex digits
};

struct AuthSettings {
  std::string admin_token;  // empty: none
  std::vector<UserCredential> users;
  std::vector<NodeCredential> nodes;
  std::string rank_key;  // the HMAC key of rank tokens (bytes); empty: no rank tokens
};

class TokenAuth {
 public:
  TokenAuth() = default;  // disabled
  // Only the admin token: every caller with it is the admin "admin".
  explicit TokenAuth(std::string token);
  // INVALID_ARGUMENT when a hash is not 64 hex digits, a name is empty or repeated, or two
  // credentials share a hash.
  static absl::StatusOr<TokenAuth> Create(AuthSettings settings);

  bool enabled() const { return state_ != nullptr; }
  // The caller of a call with this `authorization` header: UNAUTHENTICATED when missing or
  // unknown. With auth disabled, an admin without a name.
  absl::StatusOr<Identity> Authenticate(std::string_view authorization) const;
  // OK when Authenticate is.
  absl::Status Check(std::string_view authorization) const {
    return Authenticate(authorization).status();
  }
  // The token of the ranks of `job_id`'s attempt `attempt`; empty without a rank key.
  std::string RankToken(std::string_view job_id, int32_t attempt) const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

// Reads a token from a file (surrounding whitespace trimmed). INVALID_ARGUMENT if the file
// cannot be read or holds an empty token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The SHA-256 of `text` as 64 lowercase hex digits (what auth.users and auth.nodes store).
std::string Sha256Hex(std::string_view text);

// The rank key at `path`: created with 32 random bytes (mode 0600) when missing.
// INVALID_ARGUMENT when it exists but cannot be read or is shorter than 32 bytes.
absl::StatusOr<std::string> LoadOrCreateRankKey(const std::string& path);

}  // namespace dhp::api

#endif  // DHP_API_AUTH_H_
