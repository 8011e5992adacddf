// RelayMetrics as Prometheus reads it: the observer's calls become counters and histograms in
// the text served at GET /metrics over a real socket, with the queue gauge read at each scrape;
// with dhp-relay's server options, health and metrics still answer past the connection limit.
#include "worker/relay/relay_metrics.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "api/http_server.h"
#include "gtest/gtest.h"
#include "tests/http_client.h"

namespace dhp::worker {
namespace {

bool HasLine(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

class RelayMetricsTest : public testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<api::HttpServer>(api::HttpServerOptions{.address = "127.0.0.1"},
                                                RelayHttpHandler(metrics_));
    ASSERT_TRUE(server_->Start().ok());
  }
  tests::HttpResponse Get(const std::string& path) {
    return tests::HttpClient(server_->port()).Get(path);
  }

  RelayMetrics metrics_;
  std::unique_ptr<api::HttpServer> server_;
};

TEST_F(RelayMetricsTest, BatchesAndAnswersAreCountedByCodeAndTimed) {
  std::atomic<int64_t> queued{7};
  metrics_.SetQueued([&] { return queued.load(); });
  metrics_.OnBatch(40, 0.003, absl::StatusCode::kOk);
  metrics_.OnBatch(1, 4.0, absl::StatusCode::kUnavailable);
  for (int i = 0; i < 39; ++i) metrics_.OnAnswer(absl::StatusCode::kOk, 0.021);
  metrics_.OnAnswer(absl::StatusCode::kPermissionDenied, 0.021);
  metrics_.OnAnswer(absl::StatusCode::kUnavailable, 4.02);
  metrics_.OnAnswer(absl::StatusCode::kResourceExhausted, 0.0);

  tests::HttpResponse r = Get("/metrics");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  const std::string& t = r.body;
  EXPECT_TRUE(HasLine(t, "# TYPE dhp_relay_heartbeats_total counter")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_heartbeats_total{code=\"OK\"} 39")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_heartbeats_total{code=\"PERMISSION_DENIED\"} 1")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_heartbeats_total{code=\"UNAVAILABLE\"} 1")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_heartbeats_total{code=\"RESOURCE_EXHAUSTED\"} 1")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_batches_total{code=\"OK\"} 1")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_batches_total{code=\"UNAVAILABLE\"} 1")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_batch_heartbeats_count 2")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_batch_heartbeats_sum 41")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_batch_heartbeats_bucket{le=\"32\"} 1")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_batch_heartbeats_bucket{le=\"64\"} 2")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_batch_duration_seconds_count 2")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_heartbeat_duration_seconds_count 42")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_queued_heartbeats 7")) << t;

  queued = 0;  // read again at the next scrape
  EXPECT_TRUE(HasLine(Get("/metrics").body, "dhp_relay_queued_heartbeats 0"));
}

TEST_F(RelayMetricsTest, EveryFamilyIsListedBeforeAnythingHappens) {
  const std::string t = Get("/metrics").body;
  for (const char* family :
       {"dhp_relay_heartbeats_total", "dhp_relay_batches_total", "dhp_relay_batch_heartbeats",
        "dhp_relay_batch_duration_seconds", "dhp_relay_heartbeat_duration_seconds",
        "dhp_relay_queued_heartbeats"}) {
    EXPECT_NE(t.find(std::string("# HELP ") + family + " "), std::string::npos) << family;
  }
  // A zero, not an absent series, so that rate() and the alerts see the relay from the start.
  EXPECT_TRUE(HasLine(t, "dhp_relay_heartbeats_total{code=\"OK\"} 0")) << t;
  EXPECT_TRUE(HasLine(t, "dhp_relay_batches_total{code=\"OK\"} 0")) << t;
}

TEST_F(RelayMetricsTest, HealthOtherPathsAndMethods) {
  tests::HttpResponse health = Get("/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");
  EXPECT_EQ(Get("/metrics?x=1").status, 200);
  EXPECT_EQ(Get("/v1/jobs").status, 404);
  tests::HttpResponse post = tests::HttpClient(server_->port()).Post("/metrics", "{}");
  EXPECT_EQ(post.status, 405);
}

TEST_F(RelayMetricsTest, PastTheConnectionLimitHealthAndMetricsStillAnswer) {
  server_->Stop();
  api::HttpServerOptions options = RelayHttpServerOptions();
  options.address = "127.0.0.1";
  ASSERT_EQ(options.max_connections, 64u);
  server_ = std::make_unique<api::HttpServer>(options, RelayHttpHandler(metrics_));
  ASSERT_TRUE(server_->Start().ok());
  // Idle clients hold every regular slot (accepted in order, before the next one).
  std::vector<std::unique_ptr<tests::HttpClient>> idle;
  for (size_t i = 0; i < options.max_connections; ++i) {
    idle.push_back(std::make_unique<tests::HttpClient>(server_->port()));
  }
  tests::HttpClient extra(server_->port());  // a reserved slot
  tests::HttpResponse health = extra.Get("/healthz");
  EXPECT_EQ(health.status, 200) << health.body << health.error;
  EXPECT_EQ(health.body, "ok\n");
  tests::HttpResponse scrape = extra.Get("/metrics?x=1");
  EXPECT_EQ(scrape.status, 200) << scrape.body << scrape.error;
  EXPECT_TRUE(HasLine(scrape.body, "dhp_relay_batches_total{code=\"OK\"} 0")) << scrape.body;
  tests::HttpResponse other = extra.Get("/v1/jobs");  // the slot is for health and metrics
  EXPECT_EQ(other.status, 503) << other.body;
  EXPECT_NE(other.body.find("too many connections (64)"), std::string::npos) << other.body;
  tests::HttpClient another(server_->port());  // and the next reserved slot, likewise
  EXPECT_EQ(another.Get("/metrics").status, 200);
}

}  // namespace
}  // namespace dhp::worker
