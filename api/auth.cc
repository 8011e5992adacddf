#include "api/auth.h"

#include <fstream>
#include <sstream>

namespace dhp::api {

absl::Status TokenAuth::Check(std::string_view authorization) const {
  if (!enabled()) return absl::OkStatus();
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "missing credentials: send 'authorization: Bearer <token>' (dhpctl: --token-file or "
        "DHP_TOKEN)");
  }
  std::string_view given = authorization.substr(0, kPrefix.size()) == kPrefix
                               ? authorization.substr(kPrefix.size())
                               : std::string_view();
  unsigned char diff = given.size() == token_.size() ? 0 : 1;
  for (size_t i = 0; i < token_.size(); ++i) {
    diff |= static_cast<unsigned char>(token_[i] ^ (i < given.size() ? given[i] : 0));
  }
  if (diff != 0) return absl::UnauthenticatedError("invalid credentials: the token is wrong");
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("cannot read the token file " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  std::string token = buf.str();
  size_t b = token.find_first_not_of(" \t\r\n");
  size_t e = token.find_last_not_of(" \t\r\n");
  token = b == std::string::npos ? "" : token.substr(b, e - b + 1);
  if (token.empty()) return absl::InvalidArgumentError("the token file " + path + " is empty");
  return token;
}

}  // namespace dhp::api
