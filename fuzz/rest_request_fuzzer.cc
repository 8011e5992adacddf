// The REST request path, bytes in and response out: a RestGateway (HTTP server, router, auth,
// body parsing) over a fake DhpService, on loopback, with a token. Each input is sent on a new
// connection, which is then half-closed; whatever comes back must be HTTP and never a 500 (a
// handler that threw or answered nothing), and the server must keep serving.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "api/rest_gateway.h"
#include "api/rest_gateway_test_util.h"

namespace {

struct Server {
  dhp::api::testing::FakeService service;
  std::unique_ptr<dhp::api::RestGateway> gateway;
};

Server* Start() {
  auto* s = new Server();
  dhp::api::RestGatewayOptions options;
  options.address = "127.0.0.1";
  options.auth = dhp::api::TokenAuth("fuzz-token");
  options.max_body_bytes = 1 << 20;
  options.header_timeout = std::chrono::milliseconds(500);
  options.body_timeout = std::chrono::milliseconds(500);
  s->gateway = std::make_unique<dhp::api::RestGateway>(s->service, options);
  if (!s->gateway->Start().ok()) std::abort();
  return s;
}

[[noreturn]] void Fail(const std::string& what, const std::string& response) {
  std::fprintf(stderr, "rest_request_fuzzer: %s\n%s\n", what.c_str(),
               response.substr(0, 2000).c_str());
  std::abort();
}

// A connected socket to the server on `port`. A connect can be cut short by a signal (libFuzzer's
// timeout alarm fires every few seconds and is installed without SA_RESTART: EINTR failed CI
// once), so each failure is tried again on a new socket; only a server that refuses for a whole
// second counts as one that stopped serving.
int Connect(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string last_error;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    last_error = std::strerror(errno);
    if (fd >= 0) close(fd);
    usleep(10 * 1000);
  }
  Fail("the server no longer accepts connections: " + last_error, "");
}

// Sends `request` on a new connection, half-closes it, and returns what comes back (up to EOF
// or 5 s of silence).
std::string Exchange(uint16_t port, const uint8_t* data, size_t size) {
  const int fd = Connect(port);
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server may close early (a refusal): fine
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string response;
  char buf[16384];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, 5000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return response;
}

// Every status line in `response` (pipelined requests get one each).
void CheckResponses(const std::string& response) {
  if (response.empty()) return;  // closed without answering (an incomplete request)
  if (response.rfind("HTTP/1.", 0) != 0) Fail("the answer is not HTTP", response);
  for (size_t pos = 0; (pos = response.find("HTTP/1.", pos)) != std::string::npos; pos += 7) {
    if (pos != 0 && response[pos - 1] != '\n') continue;  // inside a body
    if (response.compare(pos + 9, 3, "500") == 0) Fail("a 500", response);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server* server = Start();
  CheckResponses(Exchange(server->gateway->port(), data, size));
  return 0;
}
