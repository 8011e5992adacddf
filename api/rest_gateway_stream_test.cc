// Tests the REST gateway's connections and streams end to end (rest_gateway_test_util.h: a fake
// DhpService behind a real gateway on 127.0.0.1:0): keep-alive, NDJSON watch streams and their
// errors, Stop with open streams, concurrent clients, a port in use, HTTP/1.0.
#include "api/rest_gateway.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "api/rest_gateway_test_util.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "common/proto_yaml.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dhp::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using testing::ContentType;
using testing::FakeService;
using testing::Lines;
using testing::Response;
using Client = testing::TestHttpClient;
using namespace std::chrono_literals;

using testing::RestGatewayTest;

TEST_F(RestGatewayTest, KeepAliveServesManyRequestsOnOneConnection) {
  const auto local = client_->socket().local_endpoint();
  for (int i = 0; i < 50; ++i) {
    Response res = client_->Get("/v1/jobs/j-" + std::to_string(i));
    ASSERT_EQ(res.result_int(), 200);
    EXPECT_TRUE(res.keep_alive());
    EXPECT_EQ(service_.Last<v1::GetJobRequest>().job_id(), "j-" + std::to_string(i));
  }
  EXPECT_EQ(client_->socket().local_endpoint(), local);  // still the same connection
}

TEST_F(RestGatewayTest, FiniteWatchStreamsNdjsonAndKeepsConnection) {
  service_.watch_events = 4;
  client_->StartStream("/v1/jobs/j-5/events?after=10", 0);
  Response res = client_->FinishStream();
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(ContentType(res), "application/x-ndjson");
  EXPECT_TRUE(res.chunked());
  const std::vector<std::string> lines = Lines(res.body());
  ASSERT_EQ(lines.size(), 4u) << res.body();
  for (int i = 0; i < 4; ++i) {
    v1::Event event;
    ASSERT_TRUE(ParseProtoYaml(lines[i], &event).ok()) << lines[i];
    EXPECT_EQ(event.id(), 11 + i);
    EXPECT_EQ(event.job_id(), "j-5");
  }
  const v1::WatchJobRequest req = service_.Last<v1::WatchJobRequest>();
  EXPECT_EQ(req.job_id(), "j-5");
  EXPECT_EQ(req.after_event_id(), 10);
  EXPECT_FALSE(req.follow());
  // The connection is still usable.
  EXPECT_EQ(client_->Get("/healthz").result_int(), 200);
  EXPECT_TRUE(Observed("WatchJob", 200));
}

TEST_F(RestGatewayTest, FollowStreamEndsWhenClientCloses) {
  service_.watch_events = 5;
  Response res = client_->StartStream("/v1/events?after=0&follow=true", 5);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(Lines(res.body()).size(), 5u) << res.body();
  EXPECT_EQ(service_.Last<v1::WatchJobRequest>().job_id(), "");
  EXPECT_TRUE(service_.Last<v1::WatchJobRequest>().follow());

  // While the stream is open, other connections are served.
  Client other(gateway_->port());
  EXPECT_EQ(other.Get("/v1/jobs/j-1").result_int(), 200);

  client_->Close();
  EXPECT_TRUE(service_.WaitWatchReturned(5s)) << "WatchJob did not notice the client leaving";
}

TEST_F(RestGatewayTest, QuietFollowStreamSendsHeadersEarly) {
  service_.watch_events = 0;
  Response res = client_->StartStream("/v1/jobs/j-1/events?follow=true", 0);  // headers only
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(ContentType(res), "application/x-ndjson");
  client_->Close();
  EXPECT_TRUE(service_.WaitWatchReturned(5s));
}

TEST_F(RestGatewayTest, WatchErrorBeforeEventsIsHttpError) {
  service_.error = absl::NotFoundError("no job j-404");
  Response res = client_->Get("/v1/jobs/j-404/events");
  EXPECT_EQ(res.result_int(), 404);
  EXPECT_EQ(res.body(), StatusToJson(service_.error) + "\n");
}

TEST_F(RestGatewayTest, WatchErrorAfterEventsEndsStreamWithErrorLine) {
  service_.watch_events = 2;
  service_.watch_error_after = absl::InternalError("store failed");
  client_->StartStream("/v1/jobs/j-1/events", 0);
  Response res = client_->FinishStream();
  EXPECT_EQ(res.result_int(), 200);
  const std::vector<std::string> lines = Lines(res.body());
  ASSERT_EQ(lines.size(), 3u) << res.body();
  EXPECT_EQ(lines[2], "{\"error\": " + StatusToJson(service_.watch_error_after) + "}");
}

TEST_F(RestGatewayTest, StopEndsOpenStreamsAndIdleConnections) {
  service_.watch_events = 1;
  Client watcher(gateway_->port());
  watcher.StartStream("/v1/events?follow=true", 1);
  EXPECT_EQ(client_->Get("/healthz").result_int(), 200);  // an idle keep-alive connection
  const auto start = std::chrono::steady_clock::now();
  gateway_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(service_.WaitWatchReturned(1s));
  gateway_->Stop();  // idempotent
}

TEST_F(RestGatewayTest, ConcurrentClientsAndLatency) {
  constexpr int kClients = 16;
  constexpr int kRequests = 200;
  std::vector<std::thread> threads;
  std::mutex mu;  // guards latencies and failures
  std::vector<double> latencies;
  int failures = 0;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      Client client(gateway_->port());
      std::vector<double> mine;
      int bad = 0;
      for (int i = 0; i < kRequests; ++i) {
        const auto start = std::chrono::steady_clock::now();
        Response res = client.Get("/v1/jobs/c" + std::to_string(t) + "-" + std::to_string(i));
        mine.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        if (res.result_int() != 200) ++bad;
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
      failures += bad;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  std::sort(latencies.begin(), latencies.end());
  const double p50 = latencies[latencies.size() / 2];
  const double p99 = latencies[latencies.size() * 99 / 100];
  std::printf("%d requests over %d keep-alive connections: p50 %.3f ms, p99 %.3f ms\n",
              kClients * kRequests, kClients, p50 * 1e3, p99 * 1e3);
  EXPECT_LT(p99, 0.25);  // loose: shared CI machines are noisy; the bench reports real numbers
}

TEST(RestGatewayStandaloneTest, PortInUseIsUnavailable) {
  FakeService service;
  RestGatewayOptions options;
  options.address = "127.0.0.1";
  RestGateway first(service, options);
  ASSERT_TRUE(first.Start().ok());
  options.port = first.port();
  RestGateway second(service, options);
  const absl::Status status = second.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  options.address = "not-an-ip";
  options.port = 0;
  RestGateway third(service, options);
  EXPECT_EQ(third.Start().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RestGatewayStandaloneTest, Http10ClientGetsResponseAndClose) {
  FakeService service;
  RestGatewayOptions options;
  options.address = "127.0.0.1";
  RestGateway gateway(service, options);
  ASSERT_TRUE(gateway.Start().ok());
  Client client(gateway.port());
  http::request<http::string_body> req{http::verb::get, "/healthz", 10};
  http::write(client.socket(), req);
  Response res;
  http::read(client.socket(), client.buffer(), res);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_FALSE(res.keep_alive());
  char c;
  beast::error_code ec;
  client.socket().read_some(asio::buffer(&c, 1), ec);
  EXPECT_EQ(ec, asio::error::eof);
}

}  // namespace
}  // namespace dhp::api
