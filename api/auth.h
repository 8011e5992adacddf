// TokenAuth: optional shared-secret authentication for the controller's API.
//
// When the controller is given a token (--auth-token-file), every gRPC call and REST request
// must carry `authorization: Bearer <token>`; /healthz and /metrics stay open so that probes
// and Prometheus need no secret. Without a token, everything is open (the default, safe
// because the controller listens on loopback unless told otherwise). Thread-safe (immutable).
#ifndef DHP_API_AUTH_H_
#define DHP_API_AUTH_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dhp::api {

class TokenAuth {
 public:
  TokenAuth() = default;  // disabled
  explicit TokenAuth(std::string token) : token_(std::move(token)) {}

  bool enabled() const { return !token_.empty(); }
  // OK when auth is disabled or `authorization` is "Bearer <token>"; UNAUTHENTICATED
  // otherwise. The comparison takes the same time wherever the strings differ.
  absl::Status Check(std::string_view authorization) const;

 private:
  std::string token_;
};

// Reads a token from a file (surrounding whitespace trimmed). INVALID_ARGUMENT if the file
// cannot be read or holds an empty token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace dhp::api

#endif  // DHP_API_AUTH_H_
