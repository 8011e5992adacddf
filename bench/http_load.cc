#include "bench/http_load.h"

#include <utility>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/http/write.hpp"

namespace dhp::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

constexpr uint64_t kBodyLimit = 64 << 20;  // /metrics of a large cluster is tens of MB

// `method` `target` with a Host header, and `body` (with its length) when there is one or the
// method expects one.
HttpRequest MakeRequest(const std::string& host_header, std::string_view method,
                        std::string_view target, std::string_view content_type,
                        std::string_view body) {
  HttpRequest req;
  req.version(11);
  req.method_string(beast::string_view(method.data(), method.size()));
  req.target(beast::string_view(target.data(), target.size()));
  req.set(http::field::host, host_header);
  if (!content_type.empty()) {
    req.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  }
  if (!body.empty() || method == "POST" || method == "PUT") {
    req.body().assign(body.data(), body.size());
    req.prepare_payload();
  }
  return req;
}

HttpResult ToResult(HttpResponse res) {
  HttpResult out;
  out.status = static_cast<int>(res.result_int());
  out.body = std::move(res.body());
  return out;
}

std::string FailurePrefix(const std::string& host_header, std::string_view method,
                          std::string_view target) {
  return "HTTP " + std::string(method) + " http://" + host_header + std::string(target) +
         " failed: ";
}

// Starts one asynchronous operation (`start` gets its completion handler) and runs `io` until
// it has completed; returns its error.
template <typename Start>
boost::system::error_code RunOne(asio::io_context& io, const Start& start) {
  boost::system::error_code ec;
  io.restart();
  start([&ec](boost::system::error_code e, auto&&...) { ec = e; });
  io.run();
  return ec;
}

}  // namespace

struct HttpConnection::Impl {
  Impl(std::string h, uint16_t p)
      : host(std::move(h)), port(p), host_header(host + ":" + std::to_string(port)), socket(io) {}

  void Close() {
    boost::system::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    buffer.clear();
  }

  const std::string host;
  const uint16_t port;
  const std::string host_header;
  asio::io_context io;  // only for the socket's executor; all I/O here is synchronous
  tcp::socket socket;
  beast::flat_buffer buffer;  // bytes read past the previous response (none, in practice)
};

HttpConnection::HttpConnection(std::string host, uint16_t port)
    : impl_(std::make_unique<Impl>(std::move(host), port)) {}

HttpConnection::~HttpConnection() { impl_->Close(); }

absl::Status HttpConnection::Connect() {
  if (impl_->socket.is_open()) return absl::OkStatus();
  boost::system::error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(impl_->host, std::to_string(impl_->port), ec);
  if (!ec) asio::connect(impl_->socket, endpoints, ec);
  if (ec) {
    impl_->Close();
    return absl::UnavailableError("cannot connect to http://" + impl_->host_header + ": " +
                                  ec.message());
  }
  impl_->socket.set_option(tcp::no_delay(true), ec);
  impl_->buffer.clear();
  ++connects_;
  return absl::OkStatus();
}

absl::StatusOr<HttpResult> HttpConnection::Request(std::string_view method,
                                                   std::string_view target,
                                                   std::string_view content_type,
                                                   std::string_view body) {
  if (absl::Status s = Connect(); !s.ok()) return s;
  HttpRequest req = MakeRequest(impl_->host_header, method, target, content_type, body);
  req.keep_alive(true);

  boost::system::error_code ec;
  http::write(impl_->socket, req, ec);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kBodyLimit);
  if (!ec) http::read(impl_->socket, impl_->buffer, parser, ec);
  if (ec) {
    impl_->Close();
    return absl::UnavailableError(FailurePrefix(impl_->host_header, method, target) +
                                  ec.message());
  }
  HttpResponse res = parser.release();
  if (!res.keep_alive()) impl_->Close();
  return ToResult(std::move(res));
}

// Asynchronous operations on a beast::tcp_stream, because blocking Asio calls cannot time out
// (they poll again, without limit, when SO_RCVTIMEO expires).
absl::StatusOr<HttpResult> HttpFetch(const std::string& host, uint16_t port,
                                     std::string_view method, std::string_view target,
                                     std::chrono::milliseconds timeout) {
  const std::string host_header = host + ":" + std::to_string(port);
  asio::io_context io;
  beast::tcp_stream stream(io);
  // One expiry covers every operation started after it: connect, write and read together.
  if (timeout > std::chrono::milliseconds::zero()) stream.expires_after(timeout);
  HttpRequest req = MakeRequest(host_header, method, target, {}, {});
  req.keep_alive(false);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kBodyLimit);
  beast::flat_buffer buffer;
  boost::system::error_code ec;
  const auto endpoints = tcp::resolver(io).resolve(host, std::to_string(port), ec);
  if (!ec) ec = RunOne(io, [&](auto done) { stream.async_connect(endpoints, done); });
  if (!ec) ec = RunOne(io, [&](auto done) { http::async_write(stream, req, done); });
  if (!ec) ec = RunOne(io, [&](auto done) { http::async_read(stream, buffer, parser, done); });
  const std::string failed = FailurePrefix(host_header, method, target);
  if (ec == beast::error::timeout) {
    return absl::DeadlineExceededError(failed + "no answer in " + std::to_string(timeout.count()) +
                                       " ms");
  }
  if (ec) return absl::UnavailableError(failed + ec.message());
  return ToResult(parser.release());
}

}  // namespace dhp::bench
