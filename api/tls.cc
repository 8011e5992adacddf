#include "api/tls.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace dhp::api {
namespace {

// Certificates, keys and CA bundles are kilobytes; a bigger file is a wrong path (a device, a
// log), not something to read to the end.
constexpr uintmax_t kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(what + " " + path + ": not a regular file");
  }
  if (std::filesystem::file_size(path, ec) > kMaxPemBytes || ec) {
    return absl::InvalidArgumentError(what + " " + path + ": larger than 1 MiB, not a PEM file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(what + " " + path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(what + " " + path + ": not a PEM file");
  }
  return text.str();
}

// Reads `path` into `out` unless it is empty.
absl::Status ReadOptional(const std::string& what, const std::string& path, std::string* out) {
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> pem = ReadPem(what, path);
  if (!pem.ok()) return pem.status();
  *out = *std::move(pem);
  return absl::OkStatus();
}

absl::Status CheckPair(const std::string& cert_file, const std::string& key_file,
                       const std::string& cert_name, const std::string& key_name) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(cert_name + " and " + key_name +
                                      " go together: set both or neither");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TlsPems> LoadTls(const TlsServerFiles& files) {
  absl::Status s =
      CheckPair(files.cert_file, files.key_file, "TLS certificate (cert_file)", "key (key_file)");
  if (!s.ok()) return s;
  if (!files.enabled() && !files.client_ca_file.empty()) {
    return absl::InvalidArgumentError("client_ca_file needs TLS: set cert_file and key_file");
  }
  if (files.require_client_cert && files.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "require_client_cert needs client_ca_file (the CA client certificates are checked "
        "against)");
  }
  TlsPems pems;
  pems.require_client_cert = files.require_client_cert;
  for (auto [what, path, out] : {std::tuple{"TLS certificate", &files.cert_file, &pems.cert},
                                 std::tuple{"TLS key", &files.key_file, &pems.key},
                                 std::tuple{"client CA", &files.client_ca_file, &pems.ca}}) {
    s = ReadOptional(what, *path, out);
    if (!s.ok()) return s;
  }
  return pems;
}

absl::StatusOr<TlsPems> LoadTls(const TlsClientFiles& files) {
  absl::Status s = CheckPair(files.cert_file, files.key_file, "client certificate (--cert-file)",
                             "key (--key-file)");
  if (!s.ok()) return s;
  if (!files.enabled() && !files.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs TLS: set the CA file (--ca-file) as well");
  }
  TlsPems pems;
  for (auto [what, path, out] : {std::tuple{"CA file", &files.ca_file, &pems.ca},
                                 std::tuple{"client certificate", &files.cert_file, &pems.cert},
                                 std::tuple{"client key", &files.key_file, &pems.key}}) {
    s = ReadOptional(what, *path, out);
    if (!s.ok()) return s;
  }
  return pems;
}

void AddTlsClientFlags(CLI::App& app, TlsClientFiles* files) {
  app.add_option("--ca-file", files->ca_file,
                 "Talk TLS to the controller, trusting this PEM CA (env DHP_CA_FILE)")
      ->envname("DHP_CA_FILE");
  app.add_option("--cert-file", files->cert_file,
                 "PEM client certificate for a controller that verifies them (env DHP_CERT_FILE)")
      ->envname("DHP_CERT_FILE");
  app.add_option("--key-file", files->key_file, "PEM private key of --cert-file (env DHP_KEY_FILE)")
      ->envname("DHP_KEY_FILE");
}

std::vector<std::string> TlsClientArgs(const TlsClientFiles& files) {
  std::vector<std::string> args;
  for (auto [flag, path] :
       {std::pair{"--ca-file", &files.ca_file}, std::pair{"--cert-file", &files.cert_file},
        std::pair{"--key-file", &files.key_file}}) {
    if (path->empty()) continue;
    args.push_back(flag);
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(*path, ec);
    args.push_back(ec ? *path : absolute.string());
  }
  return args;
}

}  // namespace dhp::api
