// TLS settings shared by the controller's servers (gRPC and REST) and the gRPC client used by
// dhpctl, the agent and ranks. Files are PEM. Loading reads them once, at start-up: a renewed
// certificate takes effect on restart.
#ifndef DHP_API_TLS_H_
#define DHP_API_TLS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dhp::api {

// The server side. Both cert_file and key_file, or neither (no TLS). client_ca_file: verify the
// certificates clients present against it (agents, ranks); with require_client_cert, a client
// without one is refused at the handshake.
struct TlsServerFiles {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  bool require_client_cert = false;

  bool enabled() const { return !cert_file.empty(); }
};

// The client side. ca_file: the CA that signed the server's certificate (TLS on when set).
// cert_file + key_file: a client certificate, for a server that verifies them.
struct TlsClientFiles {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;

  bool enabled() const { return !ca_file.empty(); }
};

struct TlsPems {
  std::string cert;  // the certificate chain
  std::string key;   // its private key
  std::string ca;    // server: client CA; client: server CA
  bool require_client_cert = false;
};

// Reads the files (INVALID_ARGUMENT naming the file and why: unreadable, not PEM, an
// incomplete pair, a requirement without a CA).
absl::StatusOr<TlsPems> LoadTls(const TlsServerFiles& files);
absl::StatusOr<TlsPems> LoadTls(const TlsClientFiles& files);

// The client flags of dhpctl, dhp-worker and dhp-rank: --ca-file, --cert-file, --key-file
// (env DHP_CA_FILE, DHP_CERT_FILE, DHP_KEY_FILE).
void AddTlsClientFlags(CLI::App& app, TlsClientFiles* files);
// The same flags for a child process, the paths made absolute; empty without TLS.
std::vector<std::string> TlsClientArgs(const TlsClientFiles& files);

}  // namespace dhp::api

#endif  // DHP_API_TLS_H_
