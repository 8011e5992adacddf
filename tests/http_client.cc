#include "tests/http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <optional>

#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"

namespace dhp::tests {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

class HttpClient::Impl {
 public:
  Impl(uint16_t port, const std::string& host, int timeout_ms) : host_(host), socket_(io_) {
    boost::system::error_code ec;
    socket_.connect(tcp::endpoint(asio::ip::make_address(host, ec), port), ec);
    if (ec) {
      connect_error_ = "connect to " + host + ":" + std::to_string(port) + ": " + ec.message();
      return;
    }
    // Blocking reads and writes give up after the timeout (EAGAIN) instead of hanging.
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  }

  HttpResponse Send(const std::string& method, const std::string& target,
                    const std::string& body, const std::string& content_type) {
    HttpResponse out;
    if (!Write(method, target, body, content_type, &out)) return out;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    boost::system::error_code ec;
    http::read(socket_, buffer_, parser, ec);
    return Result(parser, ec, &out);
  }

  HttpResponse StartStream(const std::string& target, int lines) {
    HttpResponse out;
    if (!Write("GET", target, "", "", &out)) return out;
    parser_.emplace();
    parser_->body_limit(boost::none);
    boost::system::error_code ec;
    http::read_header(socket_, buffer_, *parser_, ec);
    if (ec) return Result(*parser_, ec, &out);
    return ReadStream(lines);
  }

  HttpResponse ReadStream(int lines) {
    HttpResponse out;
    if (!parser_) {
      out.error = "ReadStream without StartStream";
      return out;
    }
    boost::system::error_code ec;
    auto count = [&] {
      const std::string& b = parser_->get().body();
      return static_cast<int>(std::count(b.begin(), b.end(), '\n'));
    };
    while (!ec && !parser_->is_done() && (lines < 0 || count() < lines)) {
      http::read_some(socket_, buffer_, *parser_, ec);
    }
    return Result(*parser_, ec, &out);
  }

  void Close() {
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

 private:
  bool Write(const std::string& method, const std::string& target, const std::string& body,
             const std::string& content_type, HttpResponse* out) {
    if (!connect_error_.empty()) {
      out->error = connect_error_;
      return false;
    }
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, host_);
    if (!body.empty()) {
      req.set(http::field::content_type, content_type);
      req.body() = body;
    }
    req.prepare_payload();
    boost::system::error_code ec;
    http::write(socket_, req, ec);
    if (ec) out->error = "write " + method + " " + target + ": " + ec.message();
    return !ec;
  }

  static HttpResponse Result(const http::response_parser<http::string_body>& parser,
                             const boost::system::error_code& ec, HttpResponse* out) {
    if (ec) {
      out->error = ec.message();
      out->body = parser.get().body();
      return *out;
    }
    const auto& res = parser.get();
    out->status = res.result_int();
    out->content_type = std::string(res[http::field::content_type]);
    out->body = res.body();
    return *out;
  }

  const std::string host_;
  std::string connect_error_;
  asio::io_context io_;
  tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;  // the open stream
};

HttpClient::HttpClient(uint16_t port, const std::string& host, int timeout_ms)
    : impl_(std::make_unique<Impl>(port, host, timeout_ms)) {}
HttpClient::~HttpClient() = default;

HttpResponse HttpClient::Send(const std::string& method, const std::string& target,
                              const std::string& body, const std::string& content_type) {
  return impl_->Send(method, target, body, content_type);
}
HttpResponse HttpClient::StartStream(const std::string& target, int lines) {
  return impl_->StartStream(target, lines);
}
HttpResponse HttpClient::ReadStream(int lines) { return impl_->ReadStream(lines); }
void HttpClient::Close() { impl_->Close(); }

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.push_back(text.substr(start, nl - start));
  }
  return out;
}

}  // namespace dhp::tests
