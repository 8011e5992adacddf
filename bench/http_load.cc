#include "bench/http_load.h"

#include <utility>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/http/write.hpp"

namespace dhp::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

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
  http::request<http::string_body> req;
  req.version(11);
  req.method_string(beast::string_view(method.data(), method.size()));
  req.target(beast::string_view(target.data(), target.size()));
  req.set(http::field::host, impl_->host_header);
  if (!content_type.empty()) {
    req.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
  }
  if (!body.empty() || method == "POST" || method == "PUT") {
    req.body().assign(body.data(), body.size());
    req.prepare_payload();
  }
  req.keep_alive(true);

  boost::system::error_code ec;
  http::write(impl_->socket, req, ec);
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  if (!ec) http::read(impl_->socket, impl_->buffer, parser, ec);
  if (ec) {
    impl_->Close();
    return absl::UnavailableError("HTTP " + std::string(method) + " http://" +
                                  impl_->host_header + std::string(target) + " failed: " +
                                  ec.message());
  }
  http::response<http::string_body> res = parser.release();
  if (!res.keep_alive()) impl_->Close();
  HttpResult out;
  out.status = static_cast<int>(res.result_int());
  out.body = std::move(res.body());
  return out;
}

absl::StatusOr<HttpResult> HttpFetch(const std::string& host, uint16_t port,
                                     std::string_view method, std::string_view target) {
  HttpConnection conn(host, port);
  return conn.Request(method, target);
}

}  // namespace dhp::bench
