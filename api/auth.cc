#include "api/auth.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dhp::api {
namespace {

constexpr std::string_view kRankPrefix = "rank.";

// Debian's Abseil has its own string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

// Compares in a time that does not depend on where the strings differ.
bool SameBytes(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

bool IsSha256Hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string RankMac(const std::string& key, std::string_view job_id, int32_t attempt) {
  const std::string message = absl::StrCat(Sv(job_id), "/", attempt);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &n);
  return Hex(mac, n);
}

}  // namespace

struct TokenAuth::State {
  std::string admin_token;
  std::map<std::string, Identity> by_hash;  // SHA-256 hex of a user's or node's token
  std::string rank_key;
};

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kAdmin: return "admin";
    case Role::kUser: return "user";
    case Role::kViewer: return "viewer";
    case Role::kNode: return "node";
    case Role::kRank: return "rank";
  }
  return "?";
}

absl::StatusOr<Role> ParseUserRole(std::string_view name) {
  if (name == "admin") return Role::kAdmin;
  if (name == "user") return Role::kUser;
  if (name == "viewer") return Role::kViewer;
  return absl::InvalidArgumentError(
      absl::StrCat("role: \"", Sv(name), "\" is not a role; one of admin, user, viewer"));
}

std::string Sha256Hex(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), md, &n, EVP_sha256(), nullptr);
  return Hex(md, n);
}

TokenAuth::TokenAuth(std::string token) {
  auto state = std::make_shared<State>();
  state->admin_token = std::move(token);
  state_ = std::move(state);
}

absl::StatusOr<TokenAuth> TokenAuth::Create(AuthSettings settings) {
  auto state = std::make_shared<State>();
  state->admin_token = std::move(settings.admin_token);
  state->rank_key = std::move(settings.rank_key);
  std::map<std::string, std::string> names;  // identity key -> where it was given
  auto add = [&](const std::string& where, const std::string& key, const std::string& hash,
                 Identity identity) -> absl::Status {
    if (!IsSha256Hex(hash)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".token_sha256: expected 64 lowercase hex digits (sha256sum of the token)"));
    }
    if (!names.emplace(key, where).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": repeats ", names[key]));
    }
    if (!state->by_hash.emplace(hash, std::move(identity)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".token_sha256: another credential has the same token"));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < settings.users.size(); ++i) {
    const UserCredential& u = settings.users[i];
    const std::string where = absl::StrCat("auth.users[", i, "]");
    if (u.name.empty()) return absl::InvalidArgumentError(where + ".name: must not be empty");
    if (u.role != Role::kAdmin && u.role != Role::kUser && u.role != Role::kViewer) {
      return absl::InvalidArgumentError(where + ".role: one of admin, user, viewer");
    }
    absl::Status s = add(where, "user " + u.name, u.token_sha256, Identity{u.role, u.name});
    if (!s.ok()) return s;
  }
  for (size_t i = 0; i < settings.nodes.size(); ++i) {
    const NodeCredential& n = settings.nodes[i];
    const std::string where = absl::StrCat("auth.nodes[", i, "]");
    if (n.node_id.empty()) return absl::InvalidArgumentError(where + ".node_id: must not be empty");
    absl::Status s =
        add(where, "node " + n.node_id, n.token_sha256, Identity{Role::kNode, n.node_id});
    if (!s.ok()) return s;
  }
  TokenAuth auth;
  if (!state->admin_token.empty() || !state->by_hash.empty() || !state->rank_key.empty()) {
    auth.state_ = std::move(state);
  }
  return auth;
}

absl::StatusOr<Identity> TokenAuth::Authenticate(std::string_view authorization) const {
  if (!enabled()) return Identity{Role::kAdmin, ""};
  constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "missing credentials: send 'authorization: Bearer <token>' (dhpctl: --token-file or "
        "DHP_TOKEN)");
  }
  const std::string_view given = authorization.substr(0, kPrefix.size()) == kPrefix
                                     ? authorization.substr(kPrefix.size())
                                     : std::string_view();
  const absl::Status wrong = absl::UnauthenticatedError("invalid credentials: the token is wrong");
  if (given.empty()) return wrong;
  if (!state_->admin_token.empty() && SameBytes(given, state_->admin_token)) {
    return Identity{Role::kAdmin, "admin"};
  }
  if (given.substr(0, kRankPrefix.size()) == kRankPrefix && !state_->rank_key.empty()) {
    // rank.<job>.<attempt>.<mac>: the job id may hold dots, the attempt and the mac do not.
    const std::string_view rest = given.substr(kRankPrefix.size());
    const size_t mac_dot = rest.rfind('.');
    const size_t attempt_dot = mac_dot == std::string_view::npos || mac_dot == 0
                                   ? std::string_view::npos
                                   : rest.rfind('.', mac_dot - 1);
    int32_t attempt = 0;
    if (attempt_dot == std::string_view::npos ||
        !absl::SimpleAtoi(Sv(rest.substr(attempt_dot + 1, mac_dot - attempt_dot - 1)), &attempt)) {
      return wrong;
    }
    const std::string_view job_id = rest.substr(0, attempt_dot);
    if (!SameBytes(rest.substr(mac_dot + 1), RankMac(state_->rank_key, job_id, attempt))) {
      return wrong;
    }
    Identity rank{Role::kRank, absl::StrCat(Sv(job_id), "/", attempt), std::string(job_id), attempt};
    return rank;
  }
  // A lookup by the token's hash: its timing tells nothing about a stored token.
  auto it = state_->by_hash.find(Sha256Hex(given));
  if (it == state_->by_hash.end()) return wrong;
  return it->second;
}

std::string TokenAuth::RankToken(std::string_view job_id, int32_t attempt) const {
  if (!enabled() || state_->rank_key.empty()) return "";
  return absl::StrCat(Sv(kRankPrefix), Sv(job_id), ".", attempt, ".",
                      RankMac(state_->rank_key, job_id, attempt));
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

absl::StatusOr<std::string> LoadOrCreateRankKey(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    unsigned char key[32];
    bool ok = RAND_bytes(key, sizeof(key)) == 1 &&
              ::write(fd, key, sizeof(key)) == static_cast<ssize_t>(sizeof(key)) &&
              ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) {
      ::unlink(path.c_str());
      return absl::InternalError("cannot write the rank key " + path);
    }
  }
  // stat, not std::filesystem: dhp-rank links this file, and with the PyPI LibTorch some
  // std::filesystem calls bind to libtorch.so's copy (see ckpt_export_test).
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("the rank key " + path + " is not a regular file");
  }
  if (st.st_size > 4096) {  // a device or a log, not a key: never read to the end
    return absl::InvalidArgumentError(absl::StrCat("the rank key ", path, " holds ", st.st_size,
                                                   " bytes; a key is 32 to 4096"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError("cannot read the rank key " + path);
  std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (key.size() < 32) {
    return absl::InvalidArgumentError(absl::StrCat("the rank key ", path, " holds ", key.size(),
                                                   " bytes; a key is 32 to 4096"));
  }
  return key;
}

}  // namespace dhp::api
