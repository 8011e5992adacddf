#include "api/http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "boost/asio/post.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/chunk_encode.hpp"
#include "boost/beast/http/empty_body.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/serializer.hpp"
#include "boost/beast/http/write.hpp"
#include "common/check.h"

namespace dhp::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// A synchronous stream for Beast: the socket itself, or TLS over it.
class HttpStream {
 public:
  HttpStream(tcp::socket socket, asio::ssl::context* tls) : socket_(std::move(socket)) {
    if (tls != nullptr) tls_.emplace(socket_, *tls);
  }
  tcp::socket& socket() { return socket_; }
  // The server side of the TLS handshake; nothing without TLS.
  beast::error_code Handshake() {
    beast::error_code ec;
    if (tls_) tls_->handshake(asio::ssl::stream_base::server, ec);
    return ec;
  }
  bool tls() const { return tls_.has_value(); }

  template <typename Buffers>
  size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    return tls_ ? tls_->read_some(buffers, ec) : socket_.read_some(buffers, ec);
  }
  template <typename Buffers>
  size_t read_some(const Buffers& buffers) {
    return tls_ ? tls_->read_some(buffers) : socket_.read_some(buffers);
  }
  template <typename Buffers>
  size_t write_some(const Buffers& buffers, beast::error_code& ec) {
    return tls_ ? tls_->write_some(buffers, ec) : socket_.write_some(buffers, ec);
  }
  template <typename Buffers>
  size_t write_some(const Buffers& buffers) {
    return tls_ ? tls_->write_some(buffers) : socket_.write_some(buffers);
  }

 private:
  tcp::socket socket_;
  std::optional<asio::ssl::stream<tcp::socket&>> tls_;
};

absl::StatusOr<std::shared_ptr<asio::ssl::context>> MakeHttpTlsContext(const TlsPems& pems) {
  namespace ssl = asio::ssl;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  beast::error_code ec;
  ctx->use_certificate_chain(asio::buffer(pems.cert), ec);
  if (ec) return absl::InvalidArgumentError("TLS certificate does not load: " + ec.message());
  ctx->use_private_key(asio::buffer(pems.key), ssl::context::pem, ec);
  if (ec) {
    return absl::InvalidArgumentError("TLS key does not load or does not match the certificate: " +
                                      ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return absl::InvalidArgumentError("TLS key does not match the certificate");
  }
  if (!pems.ca.empty()) {
    ctx->add_certificate_authority(asio::buffer(pems.ca), ec);
    if (ec) return absl::InvalidArgumentError("client CA does not load: " + ec.message());
    ctx->set_verify_mode(ssl::verify_peer |
                         (pems.require_client_cert ? ssl::verify_fail_if_no_peer_cert : 0));
  }
  return ctx;
}

namespace {

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Sends a small plain-text response and marks the connection for closing.
// `size`: the target's length, or (`more`) what was read of it before the header limit.
std::string TargetTooLong(size_t size, bool more) {
  return "the request's target (path and query) is " + std::string(more ? "over " : "") +
         std::to_string(size) + " bytes; at most " + std::to_string(kMaxTargetBytes) +
         " are read";
}

void WriteSimple(HttpStream& stream, HttpStatus status, const std::string& message,
                 const HttpServerOptions& options) {
  HttpRejection answer{"text/plain; charset=utf-8", message + "\n"};
  if (options.rejection) answer = options.rejection(status, message);
  http::response<http::string_body> res{status, 11};
  res.set(http::field::content_type, answer.content_type);
  res.keep_alive(false);
  res.body() = std::move(answer.body);
  res.prepare_payload();
  beast::error_code ec;
  http::write(stream, res, ec);
}

// Closes after an error response while the client may still be sending (e.g. a body over
// the limit): without draining first, the kernel answers unread data with a reset, and the
// client may lose the response. Drains for at most ~1 s or 64 MiB.
void LingeringClose(HttpStream& stream) {
  const int fd = stream.socket().native_handle();
  ::shutdown(fd, SHUT_WR);
  char buf[64 * 1024];
  size_t drained = 0;
  for (int i = 0; i < 10 && drained < (64u << 20); ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// ---- HttpResponder -------------------------------------------------------------------------

HttpResponder::HttpResponder(HttpStream& stream, const HttpRequest& request,
                             const std::atomic<bool>& server_stopping)
    : stream_(stream),
      request_(request),
      server_stopping_(server_stopping),
      fd_(stream.socket().native_handle()) {}

bool HttpResponder::Fail() {
  gone_.store(true);
  keep_alive_ = false;
  return false;
}

bool HttpResponder::Respond(HttpStatus status, std::string_view content_type, std::string body,
                            const HttpHeaders& headers) {
  std::lock_guard<std::mutex> lock(mu_);
  DHP_CHECK(status_code_ == 0) << "HttpResponder: a handler answered "
                               << std::string(request_.target()) << " twice";
  status_code_ = static_cast<int>(status);
  if (gone_.load()) return Fail();
  http::response<http::string_body> res{status, request_.version()};
  res.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  for (const auto& [name, value] : headers) res.set(name, value);
  res.keep_alive(request_.keep_alive() && !server_stopping_.load());
  keep_alive_ = res.keep_alive();
  res.body() = std::move(body);
  res.prepare_payload();
  beast::error_code ec;
  http::write(stream_, res, ec);
  return ec ? Fail() : true;
}

bool HttpResponder::BeginStream(HttpStatus status, std::string_view content_type,
                                const HttpHeaders& headers) {
  std::lock_guard<std::mutex> lock(mu_);
  DHP_CHECK(status_code_ == 0) << "HttpResponder: a handler answered "
                               << std::string(request_.target()) << " twice";
  status_code_ = static_cast<int>(status);
  streaming_ = true;
  if (gone_.load()) return Fail();
  http::response<http::empty_body> res{status, request_.version()};
  res.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  for (const auto& [name, value] : headers) res.set(name, value);
  chunked_ = request_.version() >= 11;
  if (chunked_) {
    res.chunked(true);
    res.keep_alive(request_.keep_alive() && !server_stopping_.load());
  } else {
    res.keep_alive(false);  // HTTP/1.0: the body ends when the connection closes
  }
  keep_alive_ = res.keep_alive();
  http::response_serializer<http::empty_body> serializer{res};
  beast::error_code ec;
  http::write_header(stream_, serializer, ec);
  return ec ? Fail() : true;
}

bool HttpResponder::WriteChunk(std::string_view data) {
  std::lock_guard<std::mutex> lock(mu_);
  DHP_CHECK(streaming_ && !stream_ended_) << "HttpResponder: WriteChunk outside a stream";
  if (gone_.load() || server_stopping_.load()) return Fail();
  if (data.empty()) return true;  // an empty chunk would end the stream
  beast::error_code ec;
  if (chunked_) {
    asio::write(stream_, http::make_chunk(asio::const_buffer(data.data(), data.size())), ec);
  } else {
    asio::write(stream_, asio::const_buffer(data.data(), data.size()), ec);
  }
  return ec ? Fail() : true;
}

bool HttpResponder::EndStream() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!streaming_ || stream_ended_) return !gone_.load();
  stream_ended_ = true;
  if (gone_.load()) return Fail();
  if (!chunked_) return true;
  beast::error_code ec;
  asio::write(stream_, http::make_chunk_last(), ec);
  return ec ? Fail() : true;
}

bool HttpResponder::ClientGone() const {
  if (gone_.load() || server_stopping_.load()) return true;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    // 0: orderly shutdown by the peer. Data (a pipelined request) means it is still there.
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return true;
    }
  }
  return false;
}

int HttpResponder::status_code() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_code_;
}

bool HttpResponder::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_code_ != 0;
}

bool HttpResponder::streaming() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streaming_;
}

bool HttpResponder::keep_alive() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keep_alive_ && !gone_.load();
}

// ---- HttpServer ----------------------------------------------------------------------------

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : options_(std::move(options)), handler_(std::move(handler)), acceptor_(io_), watchdog_(io_) {}

HttpServer::~HttpServer() { Stop(); }

HttpServer::Connection::Connection(std::unique_ptr<HttpStream> s, bool r)
    : stream(std::move(s)), reserved(r) {}
HttpServer::Connection::~Connection() = default;

absl::Status HttpServer::Start() {
  if (started_) return absl::FailedPreconditionError("HttpServer::Start called twice");
  boost::system::error_code ec;
  const std::string host = options_.address == "localhost" ? "127.0.0.1" : options_.address;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) {
    return absl::InvalidArgumentError("bind address \"" + options_.address +
                                      "\" is not an IP address (e.g. 0.0.0.0, 127.0.0.1, ::)");
  }
  const tcp::endpoint endpoint(address, options_.port);
  const std::string where = options_.address + ":" + std::to_string(options_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    return absl::UnavailableError("cannot listen on " + where + ": " + ec.message());
  }
  port_.store(acceptor_.local_endpoint(ec).port());
  started_ = true;
  AcceptNext();
  ArmWatchdog();
  accept_thread_ = std::thread([this] { io_.run(); });
  return absl::OkStatus();
}

void HttpServer::AcceptNext() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (stopping_.load() || ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of file descriptors and the like: back off instead of spinning.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } else {
      OnAccept(std::move(socket));
    }
    AcceptNext();
  });
}

void HttpServer::ArmWatchdog() {
  watchdog_.expires_after(std::chrono::milliseconds(100));
  watchdog_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_.load()) return;
    EnforceDeadlines();
    ArmWatchdog();
  });
}

void HttpServer::EnforceDeadlines() {
  const int64_t now = SteadyNanos();
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::unique_ptr<Connection>& conn : connections_) {
    const int64_t deadline = conn->deadline_ns.load();
    if (conn->done || deadline == 0 || now < deadline || conn->timed_out.exchange(true)) continue;
    // Ends the blocked read with end-of-file; the connection's thread answers 408.
    ::shutdown(conn->stream->socket().native_handle(), SHUT_RD);
  }
}

void HttpServer::ReapLocked(std::vector<std::thread>* finished) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done) {
      finished->push_back(std::move((*it)->thread));
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void HttpServer::OnAccept(tcp::socket socket) {
  std::vector<std::thread> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked(&finished);
    const size_t open = connections_.size();
    if (open >= options_.max_connections + options_.reserved_connections) {
      boost::system::error_code ignored;
      socket.close(ignored);
    } else {
      auto conn = std::make_unique<Connection>(
          std::make_unique<HttpStream>(std::move(socket), options_.tls.get()),
          open >= options_.max_connections);
      Connection* raw = conn.get();
      connections_.push_back(std::move(conn));
      raw->thread = std::thread([this, raw] { Serve(raw); });
    }
  }
  for (std::thread& t : finished) t.join();
}

void HttpServer::Serve(Connection* conn) {
  boost::system::error_code ignored;
  tcp::socket& socket = conn->stream->socket();
  socket.set_option(tcp::no_delay(true), ignored);
  // The TLS handshake counts against the first request's header deadline.
  conn->deadline_ns.store(SteadyNanos() + options_.header_timeout.count() * 1000000);
  const bool handshaken = !conn->stream->Handshake();
  conn->deadline_ns.store(0);
  beast::flat_buffer buffer;
  for (bool first = true; handshaken && !stopping_.load() && ServeOne(conn, buffer, first);
       first = false) {
  }
  std::lock_guard<std::mutex> lock(mu_);
  socket.shutdown(tcp::socket::shutdown_both, ignored);
  socket.close(ignored);
  conn->done = true;
}

bool HttpServer::ReadRequest(Connection* conn, beast::flat_buffer& buffer,
                             http::request_parser<http::string_body>& parser) {
  HttpStream& socket = *conn->stream;
  auto set_deadline = [&](std::chrono::milliseconds within) {
    conn->deadline_ns.store(within.count() == 0 ? 0 : SteadyNanos() + within.count() * 1000000);
  };
  parser.body_limit(options_.max_body_bytes);
  parser.header_limit(kMaxHeaderBytes);
  beast::error_code ec;
  // A reserved connection that stalls gives its slot back after 1 s.
  const std::chrono::milliseconds header_timeout =
      conn->reserved ? std::min(options_.header_timeout, std::chrono::milliseconds(1000))
                     : options_.header_timeout;
  set_deadline(header_timeout);
  http::read_header(socket, buffer, parser, ec);
  if (!ec && parser.get().target().size() > kMaxTargetBytes) {
    set_deadline(std::chrono::milliseconds(0));
    WriteSimple(socket, HttpStatus::uri_too_long,
                TargetTooLong(parser.get().target().size(), false), options_);
    LingeringClose(socket);
    return false;
  }
  if (!ec && !parser.is_done()) {
    if (options_.check_headers) {
      if (std::optional<HttpRefusal> refusal = options_.check_headers(parser.get())) {
        set_deadline(std::chrono::milliseconds(0));
        WriteSimple(socket, refusal->status, refusal->message, options_);
        LingeringClose(socket);
        return false;
      }
    }
    const auto expect = parser.get()[http::field::expect];
    if (beast::iequals(expect, "100-continue")) {
      static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::write(socket, asio::const_buffer(kContinue, sizeof(kContinue) - 1), ec);
    }
    set_deadline(options_.body_timeout);
    if (!ec) http::read(socket, buffer, parser, ec);
  }
  set_deadline(std::chrono::milliseconds(0));
  if (!ec) return true;
  if (conn->timed_out.load()) {
    WriteSimple(
        socket, HttpStatus::request_timeout,
        std::string("the request did not arrive in time (") +
            (parser.is_header_done() ? "body" : "headers") + " within " +
            std::to_string(
                (parser.is_header_done() ? options_.body_timeout : header_timeout).count()) +
            " ms)",
        options_);
  } else if (ec == http::error::body_limit) {
    WriteSimple(
        socket, HttpStatus::payload_too_large,
        "request body exceeds the limit of " + std::to_string(options_.max_body_bytes) + " bytes",
        options_);
    LingeringClose(socket);
  } else if (ec == http::error::header_limit) {
    // Still in the request line: the target alone is over the limit.
    const std::string_view read(static_cast<const char*>(buffer.data().data()),
                                buffer.data().size());
    if (read.find('\n') == std::string_view::npos) {
      WriteSimple(socket, HttpStatus::uri_too_long, TargetTooLong(read.size(), true), options_);
    } else {
      WriteSimple(socket, HttpStatus::request_header_fields_too_large,
                  "the request's headers exceed the limit of " +
                      std::to_string(kMaxHeaderBytes) + " bytes in all",
                  options_);
    }
    LingeringClose(socket);
  } else if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
             ec != http::error::end_of_stream && ec != http::error::partial_message) {
    WriteSimple(socket, HttpStatus::bad_request, "malformed HTTP request: " + ec.message(),
                options_);
    LingeringClose(socket);
  }
  return false;  // end_of_stream (client closed between requests) lands here too
}

bool HttpServer::WaitForRequest(Connection* conn, beast::flat_buffer& buffer, bool first) {
  // Between requests: wait for the next one at most idle_timeout (1 s when reserved); a new
  // connection that sends nothing is closed after header_timeout.
  auto idle = conn->reserved ? std::chrono::milliseconds(1000) : options_.idle_timeout;
  if (first) idle = std::min(idle, options_.header_timeout);
  HttpStream& stream = *conn->stream;
  if (stream.tls()) {
    // TLS reads the socket ahead into its own buffers (the request may already be in them,
    // read with the handshake), so poll() cannot tell: read the first bytes, with a deadline.
    conn->deadline_ns.store(SteadyNanos() + idle.count() * 1000000);
    beast::error_code ec;
    const size_t n = stream.read_some(buffer.prepare(16 * 1024), ec);
    conn->deadline_ns.store(0);
    if (ec || conn->timed_out.load() || stopping_.load()) return false;
    buffer.commit(n);
    return true;
  }
  pollfd p{stream.socket().native_handle(), POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, static_cast<int>(idle.count()));
  } while (r < 0 && errno == EINTR);
  return r > 0 && !stopping_.load();
}

bool HttpServer::ServeOne(Connection* conn, beast::flat_buffer& buffer, bool first) {
  HttpStream& socket = *conn->stream;
  if (buffer.size() == 0 && !WaitForRequest(conn, buffer, first)) return false;

  http::request_parser<http::string_body> parser;
  if (!ReadRequest(conn, buffer, parser)) return false;
  const HttpRequest request = parser.release();
  if (conn->reserved) {
    const std::string_view target(request.target().data(), request.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (std::find(options_.reserved_paths.begin(), options_.reserved_paths.end(), path) ==
        options_.reserved_paths.end()) {
      WriteSimple(socket, HttpStatus::service_unavailable,
                  "too many connections (" + std::to_string(options_.max_connections) +
                      "); this one may only ask for health and metrics",
                  options_);
      return false;
    }
  }
  HttpResponder responder(socket, request, stopping_);
  try {
    handler_(request, responder);
  } catch (const std::exception& e) {
    if (!responder.started()) {
      responder.Respond(HttpStatus::internal_server_error, "text/plain; charset=utf-8",
                        std::string("internal error: ") + e.what() + "\n");
    }
    return false;
  }
  if (!responder.started()) {
    responder.Respond(HttpStatus::internal_server_error, "text/plain; charset=utf-8",
                      "the handler sent no response\n");
  } else if (responder.streaming()) {
    responder.EndStream();
  }
  return responder.keep_alive() && !stopping_.load();
}

void HttpServer::Stop() {
  if (!started_ || stopping_.exchange(true)) return;
  asio::post(io_, [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    watchdog_.cancel();
  });
  accept_thread_.join();

  // Wake every connection blocked in a read or write; handlers see ClientGone().
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& conn : connections_) {
      if (!conn->done) ::shutdown(conn->stream->socket().native_handle(), SHUT_RDWR);
      threads.push_back(std::move(conn->thread));
    }
  }
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  connections_.clear();
}

// ---- URL helpers ---------------------------------------------------------------------------

absl::StatusOr<std::string> PercentDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      const int hi = i + 1 < text.size() ? HexValue(text[i + 1]) : -1;
      const int lo = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return absl::InvalidArgumentError("malformed percent-escape in \"" + std::string(text) +
                                          "\"");
      }
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

absl::StatusOr<RequestTarget> ParseRequestTarget(std::string_view target) {
  RequestTarget out;
  const size_t q = target.find('?');
  out.path = std::string(target.substr(0, q));
  if (out.path.empty() || out.path[0] != '/') {
    return absl::InvalidArgumentError("request target must start with '/'");
  }
  if (q == std::string_view::npos) return out;
  std::string_view query = target.substr(q + 1);
  const size_t hash = query.find('#');
  if (hash != std::string_view::npos) query = query.substr(0, hash);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    absl::StatusOr<std::string> key = PercentDecode(part.substr(0, eq), true);
    if (!key.ok()) return key.status();
    absl::StatusOr<std::string> value = PercentDecode(
        eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1), true);
    if (!value.ok()) return value.status();
    out.query.emplace_back(*std::move(key), *std::move(value));
  }
  return out;
}

}  // namespace dhp::api
