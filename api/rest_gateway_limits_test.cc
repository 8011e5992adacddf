// The REST gateway's own limits, over real sockets: bodies over the limit (413), long URLs
// (414) and headers (431), bytes that are not HTTP (400), slow headers and bodies (408), the
// token checked before a body is read (401), the connection cap with its reserve for health and
// metrics, and 100 Continue.
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/rest_gateway.h"
#include "api/rest_gateway_test_util.h"
#include "boost/asio/buffer.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"

namespace dhp::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using testing::Response;
using testing::RestGatewayTest;
using Client = testing::TestHttpClient;
using namespace std::chrono_literals;

TEST_F(RestGatewayTest, BodyOverLimitIs413) {
  gateway_->Stop();
  RestGatewayOptions options;
  options.max_body_bytes = 1024;
  StartGateway(options);
  Response res = client_->Post("/v1/jobs", "{\"spec_text\": \"" + std::string(4000, 'x') + "\"}");
  EXPECT_EQ(res.result_int(), 413);
  EXPECT_EQ(res[http::field::content_type], "application/json");  // the Error shape
  EXPECT_EQ(res.body(),
            "{\"code\": 8, \"status\": \"RESOURCE_EXHAUSTED\", \"message\": \"request body exceeds "
            "the limit of 1024 bytes\"}\n");
  EXPECT_TRUE(Observed("Unrouted", 413));
  EXPECT_EQ(service_.calls(), 0);
  Client again(gateway_->port());
  EXPECT_EQ(again.Post("/v1/jobs", R"({"spec_text": "small"})").result_int(), 200);
}

TEST_F(RestGatewayTest, BytesThatAreNotHttpAre400InTheErrorShape) {
  const std::string garbage = "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n";
  boost::asio::write(client_->socket(), boost::asio::buffer(garbage));
  http::response<http::string_body> res;
  http::read(client_->socket(), client_->buffer(), res);
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_EQ(res[http::field::content_type], "application/json");
  EXPECT_EQ(res.body().rfind("{\"code\": 3, \"status\": \"INVALID_ARGUMENT\", \"message\": "
                             "\"malformed HTTP request: ",
                             0),
            0u)
      << res.body();
  EXPECT_TRUE(Observed("Unrouted", 400));
  EXPECT_EQ(service_.calls(), 0);
}

// Reads one response from `client`'s connection, which the server then closes.
Response ReadClosing(Client& client) {
  Response res;
  beast::error_code ec;
  http::read(client.socket(), client.buffer(), res, ec);
  EXPECT_FALSE(ec) << ec.message();
  char byte;
  client.socket().read_some(asio::buffer(&byte, 1), ec);
  EXPECT_EQ(ec, asio::error::eof);  // closed after the answer
  return res;
}

// A long URL is 414 whether it fits the header limit or not; long headers are 431.
TEST_F(RestGatewayTest, LongTargetsAre414AndLongHeaders431) {
  for (const size_t length : {kMaxTargetBytes + 1, kMaxHeaderBytes + 10}) {
    Client client(gateway_->port());
    const std::string raw =
        "GET /v1/jobs/" + std::string(length, 'j') + " HTTP/1.1\r\nHost: x\r\n\r\n";
    asio::write(client.socket(), asio::buffer(raw));
    const Response res = ReadClosing(client);
    EXPECT_EQ(res.result_int(), 414) << length;
    EXPECT_EQ(res.body().rfind(R"({"code": 8, "status": "RESOURCE_EXHAUSTED", "message": )", 0),
              0u)
        << res.body();
    EXPECT_NE(res.body().find(length < kMaxHeaderBytes
                                  ? "the request's target (path and query) is 16394 bytes; "
                                  : "the request's target (path and query) is over 65536 bytes; "),
              std::string::npos)
        << res.body();
    EXPECT_NE(res.body().find("; at most 16384 are read"), std::string::npos) << res.body();
  }
  Client client(gateway_->port());
  const std::string raw = "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: " +
                          std::string(kMaxHeaderBytes, 'h') + "\r\n\r\n";
  asio::write(client.socket(), asio::buffer(raw));
  const Response res = ReadClosing(client);
  EXPECT_EQ(res.result_int(), 431);
  EXPECT_NE(res.body().find("the request's headers exceed the limit of 65536 bytes in all"),
            std::string::npos)
      << res.body();
  EXPECT_EQ(service_.calls(), 0);
  EXPECT_TRUE(Observed("Unrouted", 414));
  EXPECT_TRUE(Observed("Unrouted", 431));
  // A target at the limit is read (and routed: no such job is the service's answer).
  Client fine(gateway_->port());
  const std::string path = "/v1/jobs/" + std::string(kMaxTargetBytes - 9, 'j');
  EXPECT_NE(fine.Get(path).result_int(), 414);
}

TEST_F(RestGatewayTest, SlowHeadersAndBodiesAre408) {
  gateway_->Stop();
  RestGatewayOptions options;
  options.header_timeout = 300ms;
  options.body_timeout = 300ms;
  StartGateway(options);
  const auto start = std::chrono::steady_clock::now();
  asio::write(client_->socket(), asio::buffer(std::string("GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")));
  Response res = ReadClosing(*client_);  // the blank line never comes
  EXPECT_EQ(res.result_int(), 408);
  EXPECT_NE(res.body().find("\"DEADLINE_EXCEEDED\""), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("headers within 300 ms"), std::string::npos) << res.body();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_TRUE(Observed("Unrouted", 408));

  Client slow(gateway_->port());
  asio::write(slow.socket(),
              asio::buffer(std::string("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                       "application/json\r\nContent-Length: 100\r\n\r\n{\"spec")));
  res = ReadClosing(slow);
  EXPECT_EQ(res.result_int(), 408);
  EXPECT_NE(res.body().find("body within 300 ms"), std::string::npos) << res.body();
  EXPECT_EQ(service_.calls(), 0);
  // A connection that asks nothing within header_timeout is closed (nothing to answer)...
  Client silent(gateway_->port());
  char byte;
  beast::error_code ec;
  silent.socket().read_some(asio::buffer(&byte, 1), ec);
  EXPECT_EQ(ec, asio::error::eof);
  // ... but between requests a connection may idle for idle_timeout.
  Client fine(gateway_->port());
  EXPECT_EQ(fine.Get("/v1/jobs/j-1").result_int(), 200);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(fine.Get("/v1/jobs/j-1").result_int(), 200);
}

TEST_F(RestGatewayTest, WithAuthTheBodyIsNotReadWithoutTheToken) {
  gateway_->Stop();
  RestGatewayOptions options;
  options.auth = TokenAuth("s3cret");
  StartGateway(options);
  // Claims 4 MB and asks whether to send it: the answer is 401, not 100 Continue.
  asio::write(client_->socket(),
              asio::buffer(std::string("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                       "application/json\r\nExpect: 100-continue\r\n"
                                       "Content-Length: 4000000\r\n\r\n")));
  Response res = ReadClosing(*client_);
  EXPECT_EQ(res.result_int(), 401);
  EXPECT_NE(res.body().find("\"UNAUTHENTICATED\""), std::string::npos) << res.body();
  EXPECT_TRUE(Observed("Unrouted", 401));
  EXPECT_EQ(service_.calls(), 0);
  // With the token the same request is read and served; health needs none.
  Client authed(gateway_->port());
  http::request<http::string_body> req{http::verb::post, "/v1/jobs", 11};
  req.set(http::field::host, "x");
  req.set(http::field::authorization, "Bearer s3cret");
  req.set(http::field::content_type, "application/json");
  req.body() = R"({"spec_text": "x"})";
  req.prepare_payload();
  http::write(authed.socket(), req);
  http::read(authed.socket(), authed.buffer(), res);
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(authed.Get("/healthz").result_int(), 200);
}

TEST_F(RestGatewayTest, PastTheConnectionLimitHealthAndMetricsStayReachable) {
  gateway_->Stop();
  RestGatewayOptions options;
  options.max_connections = 2;
  StartGateway(options);  // client_ is one connection
  Client hog(gateway_->port());
  EXPECT_EQ(hog.Get("/v1/jobs/j-1").result_int(), 200);  // both regular slots are taken
  EXPECT_EQ(client_->Get("/v1/jobs/j-1").result_int(), 200);
  Client extra(gateway_->port());  // a reserved slot
  EXPECT_EQ(extra.Get("/healthz").result_int(), 200);
  EXPECT_EQ(extra.Get("/metrics").result_int(), 200);
  Response res = extra.Get("/v1/jobs/j-1");  // anything else: 503, and the slot is freed
  EXPECT_EQ(res.result_int(), 503);
  EXPECT_EQ(res[http::field::connection], "close");
  EXPECT_NE(res.body().find("too many connections (2)"), std::string::npos) << res.body();
}

TEST_F(RestGatewayTest, ExpectContinueIsHonoured) {
  http::request<http::string_body> req{http::verb::post, "/v1/jobs", 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::expect, "100-continue");
  req.set(http::field::content_type, "application/json");
  req.body() = R"({"spec_text": "x"})";
  req.prepare_payload();
  http::request_serializer<http::string_body> sr{req};
  http::write_header(client_->socket(), sr);
  http::response_parser<http::empty_body> cont_parser;
  http::read_header(client_->socket(), client_->buffer(), cont_parser);
  EXPECT_EQ(cont_parser.get().result_int(), 100);
  http::write(client_->socket(), sr);
  Response res;
  http::read(client_->socket(), client_->buffer(), res);
  EXPECT_EQ(res.result_int(), 200) << res.body();
}

}  // namespace
}  // namespace dhp::api
