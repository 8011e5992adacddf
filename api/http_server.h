// HttpServer: a small HTTP/1.1 server on Boost.Beast, with keep-alive and chunked streaming.
//
// It knows nothing about dhp's API: every complete request goes to one HttpHandler, which
// answers through an HttpResponder, either once (Respond) or as a stream of chunks
// (BeginStream, WriteChunk..., EndStream). The REST gateway (api/rest_gateway.h) is the
// handler that maps requests onto DhpService.
//
// Threading: one acceptor thread (an io_context running async_accept) and one thread per
// connection that reads requests synchronously and runs the handler inline. Handlers may
// therefore block (a long KvWait, an endless watch stream) without holding up any other
// connection, and a keep-alive request costs no thread hand-off. Idle keep-alive
// connections are closed after `idle_timeout`; at most `max_connections` are open at once
// (more are refused by closing them).
//
// TLS: with HttpServerOptions::tls set (MakeHttpTlsContext), every connection is TLS; the
// handshake must finish within header_timeout. A connection's reads and writes never overlap
// (the handler runs between reads), as OpenSSL requires.
//
// Thread-safety: Start/Stop/port may be called from any thread (Start and Stop not
// concurrently with each other). Stop closes the listener, shuts every connection's socket
// down so blocked reads and writes fail (HttpResponder::ClientGone turns true for streams),
// then waits for the handlers still running to return. HttpResponder is thread-safe.
#ifndef DHP_API_HTTP_SERVER_H_
#define DHP_API_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/tls.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/message.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/status.hpp"
#include "boost/beast/http/string_body.hpp"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace dhp::api {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpStatus = boost::beast::http::status;
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The answer to one request. Exactly one of: Respond once; or BeginStream, any number of
// WriteChunk, EndStream. Every call returns false once the client is gone (a write failed,
// the peer closed, or the server is stopping); the handler should then return promptly.
// A connection's byte stream: the TCP socket, or TLS over it (defined in http_server.cc).
class HttpStream;

class HttpResponder {
 public:
  HttpResponder(HttpStream& stream, const HttpRequest& request,
                const std::atomic<bool>& server_stopping);
  HttpResponder(const HttpResponder&) = delete;
  HttpResponder& operator=(const HttpResponder&) = delete;

  bool Respond(HttpStatus status, std::string_view content_type, std::string body,
               const HttpHeaders& headers = {});
  // Sends the status line and headers with chunked transfer encoding (HTTP/1.0 clients get
  // a close-delimited body instead).
  bool BeginStream(HttpStatus status, std::string_view content_type,
                   const HttpHeaders& headers = {});
  // Sends one chunk and flushes it to the socket.
  bool WriteChunk(std::string_view data);
  // Sends the last chunk. Called by the server if the handler leaves a stream open.
  bool EndStream();

  // True once a write failed, the server is stopping, or the peer closed its side of the
  // connection (noticed without reading: poll + MSG_PEEK). Cheap enough to poll often.
  bool ClientGone() const;

  // The status sent, 0 while nothing has been sent.
  int status_code() const;
  bool started() const;
  bool streaming() const;
  // False when the connection must be closed after this response.
  bool keep_alive() const;

 private:
  bool Fail();  // marks the client gone; returns false

  HttpStream& stream_;
  const HttpRequest& request_;
  const std::atomic<bool>& server_stopping_;
  const int fd_;

  mutable std::mutex mu_;  // guards the fields below and serializes writes to socket_
  int status_code_ = 0;
  bool streaming_ = false;
  bool stream_ended_ = false;
  bool chunked_ = false;
  bool keep_alive_ = true;
  std::atomic<bool> gone_{false};
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;

// What the server sends for a request it refuses itself (see HttpServerOptions::rejection).
struct HttpRejection {
  std::string content_type;
  std::string body;
};

// A request the server refuses before reading its body (see HttpServerOptions::check_headers).
struct HttpRefusal {
  HttpStatus status;
  std::string message;
};

// A request's target (its path and query) and its header section, at most.
inline constexpr size_t kMaxTargetBytes = 16 * 1024;
inline constexpr size_t kMaxHeaderBytes = 64 * 1024;

struct HttpServerOptions {
  std::string address = "0.0.0.0";
  uint16_t port = 0;                // 0: an ephemeral port (see HttpServer::port)
  size_t max_body_bytes = 4 << 20;  // larger bodies get 413
  // Connections served at once. Past it, up to `reserved_connections` more are accepted for
  // `reserved_paths` only (health and metrics stay reachable while clients hog the rest); any
  // other request on them is 503, and they idle, or wait for headers, at most 1 s. Past both,
  // connections are closed at once.
  size_t max_connections = 1024;
  size_t reserved_connections = 16;
  std::vector<std::string> reserved_paths;
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(2)};  // between requests
  // From the first byte of a request to its last header line, and from there to its body's
  // last byte. Past either the request is answered 408 and the connection closed.
  std::chrono::milliseconds header_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds body_timeout{std::chrono::seconds(60)};
  // Called with a request's headers before its body is read (and before 100 Continue): a
  // refusal is answered without reading the body (e.g. 401 for a missing token, so that
  // unauthenticated uploads cost nothing). Called from connection threads, concurrently.
  std::function<std::optional<HttpRefusal>(const HttpRequest& headers)> check_headers;
  // The server answers some requests itself, before any handler sees them: 400 for a request
  // that is not HTTP, 408 for one too slow, 413 for a body over max_body_bytes, 414 for a
  // target (path and query) over kMaxTargetBytes, 431 for headers over kMaxHeaderBytes in all,
  // 503 on a reserved connection, and check_headers' refusals. `rejection` formats those answers
  // (content type and body from the status and a message) and is told of each one; empty:
  // text/plain with the message. Called from connection threads, concurrently.
  std::function<HttpRejection(HttpStatus status, const std::string& message)> rejection;
  // Serve TLS with this context (MakeHttpTlsContext); null: plain HTTP.
  std::shared_ptr<boost::asio::ssl::context> tls;
};

// A TLS server context from PEM (api/tls.h): TLS 1.2 or later, the certificate chain and its
// key (INVALID_ARGUMENT when they do not load or do not match), and, with `pems.ca`, client
// certificates verified against it (required with pems.require_client_cert).
absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeHttpTlsContext(const TlsPems& pems);

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();  // Stops.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving. UNAVAILABLE if the address cannot be bound (port in use),
  // INVALID_ARGUMENT if it does not parse, FAILED_PRECONDITION if already started.
  absl::Status Start();
  // The bound port (the actual one when options.port was 0); 0 before Start.
  uint16_t port() const { return port_.load(); }
  // Idempotent. Waits for running handlers to return.
  void Stop();

 private:
  struct Connection {
    Connection(std::unique_ptr<HttpStream> s, bool r);
    ~Connection();
    std::unique_ptr<HttpStream> stream;
    const bool reserved;  // accepted past max_connections: reserved_paths only
    std::thread thread;
    bool done = false;  // guarded by HttpServer::mu_; socket closed, thread about to exit
    // Steady-clock nanoseconds by which the request being read must be in; 0: none. Past it
    // the watchdog shuts the socket for reading, which ends the blocked read, and sets
    // timed_out.
    std::atomic<int64_t> deadline_ns{0};
    std::atomic<bool> timed_out{false};
  };

  void AcceptNext();
  void OnAccept(boost::asio::ip::tcp::socket socket);
  void Serve(Connection* conn);
  // Returns false when the connection must close.
  // `first`: the connection's first request, which must start within header_timeout.
  bool ServeOne(Connection* conn, boost::beast::flat_buffer& buffer, bool first);
  // Waits for the next request's first bytes (idle_timeout; header_timeout when `first`).
  // False when the connection must close.
  bool WaitForRequest(Connection* conn, boost::beast::flat_buffer& buffer, bool first);
  void ReapLocked(std::vector<std::thread>* finished);
  // Reads one request (headers, the check_headers hook, the body) within the deadlines. False
  // when the connection must close; the client has been answered where it could be.
  bool ReadRequest(Connection* conn, boost::beast::flat_buffer& buffer,
                   boost::beast::http::request_parser<boost::beast::http::string_body>& parser);
  void ArmWatchdog();  // on io_: every 100 ms, EnforceDeadlines
  void EnforceDeadlines();

  const HttpServerOptions options_;
  const HttpHandler handler_;
  std::atomic<uint16_t> port_{0};
  std::atomic<bool> stopping_{false};
  bool started_ = false;  // only touched by Start/Stop, which are not concurrent

  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;  // used only on accept_thread_ after Start
  boost::asio::steady_timer watchdog_;       // likewise
  std::thread accept_thread_;

  std::mutex mu_;  // guards connections_ (membership and each Connection::done)
  std::list<std::unique_ptr<Connection>> connections_;
};

// ---- URL helpers ---------------------------------------------------------------------------

// Decodes %XX escapes (and '+' as a space when `plus_is_space`). INVALID_ARGUMENT on a
// malformed escape.
absl::StatusOr<std::string> PercentDecode(std::string_view text, bool plus_is_space);

struct RequestTarget {
  std::string path;                                        // still percent-encoded
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order
};
// Splits "/a/b?x=1&y=%20" into path and decoded query parameters ("?flag" gives value "").
absl::StatusOr<RequestTarget> ParseRequestTarget(std::string_view target);

}  // namespace dhp::api

#endif  // DHP_API_HTTP_SERVER_H_
