#include "worker/relay/relay_metrics.h"

#include <string_view>
#include <utility>

#include "absl/status/status.h"

namespace dhp::worker {
namespace {

const prometheus::Histogram::BucketBoundaries& BatchSizeBuckets() {
  static const auto* const kBuckets = new prometheus::Histogram::BucketBoundaries{
      1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  return *kBuckets;
}

constexpr char kMetricsPath[] = "/metrics";
constexpr char kHealthPath[] = "/healthz";

std::string CodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  return name.empty() ? "code_" + std::to_string(static_cast<int>(code)) : name;
}

}  // namespace

RelayMetrics::RelayMetrics()
    : heartbeats_(metrics_.AddCounter("dhp_relay_heartbeats_total",
                                      "Heartbeats answered to agents, by status code.")),
      batches_(metrics_.AddCounter("dhp_relay_batches_total",
                                   "HeartbeatBatch calls to the controller, by outcome.")),
      batch_size_(metrics_.AddHistogram("dhp_relay_batch_heartbeats",
                                        "Heartbeats per HeartbeatBatch call.")),
      batch_seconds_(metrics_.AddHistogram("dhp_relay_batch_duration_seconds",
                                           "Latency of a HeartbeatBatch call.")),
      heartbeat_seconds_(metrics_.AddHistogram(
          "dhp_relay_heartbeat_duration_seconds",
          "From a heartbeat's arrival at the relay to its answer.")),
      batch_size_all_(batch_size_.Add({}, BatchSizeBuckets())),
      batch_seconds_all_(batch_seconds_.Add({}, LatencyBuckets())),
      heartbeat_seconds_all_(heartbeat_seconds_.Add({}, LatencyBuckets())),
      queued_(metrics_.AddComputedGauges(
          {{"dhp_relay_queued_heartbeats", "Heartbeats waiting for their batch.", {}}})) {
  // Present from the start, so that rate() and alerts see a zero rather than no series.
  heartbeats_.Add({{"code", "OK"}});
  batches_.Add({{"code", "OK"}});
  queued_.Set({{"dhp_relay_queued_heartbeats", {{{}, 0}}}});
}

void RelayMetrics::OnBatch(int heartbeats, double seconds, absl::StatusCode code) {
  batches_.Add({{"code", CodeName(code)}}).Increment();
  batch_size_all_.Observe(heartbeats);
  batch_seconds_all_.Observe(seconds);
}

void RelayMetrics::OnAnswer(absl::StatusCode code, double seconds) {
  heartbeats_.Add({{"code", CodeName(code)}}).Increment();
  heartbeat_seconds_all_.Observe(seconds);
}

void RelayMetrics::SetQueued(std::function<int64_t()> queued) {
  metrics_.AddCollector([this, queued = std::move(queued)] {
    queued_.Set({{"dhp_relay_queued_heartbeats", {{{}, static_cast<double>(queued())}}}});
  });
}

api::HttpHandler RelayHttpHandler(const RelayMetrics& metrics) {
  return [&metrics](const api::HttpRequest& req, api::HttpResponder& out) {
    namespace http = boost::beast::http;
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (path != kMetricsPath && path != kHealthPath) {
      out.Respond(api::HttpStatus::not_found, "text/plain", "no such path; try /metrics\n");
      return;
    }
    if (req.method() != http::verb::get) {
      out.Respond(api::HttpStatus::method_not_allowed, "text/plain",
                  "only GET is allowed here\n", {{"Allow", "GET"}});
      return;
    }
    if (path == kHealthPath) {
      out.Respond(api::HttpStatus::ok, "text/plain", "ok\n");
      return;
    }
    out.Respond(api::HttpStatus::ok, "text/plain; version=0.0.4; charset=utf-8",
                metrics.RenderText());
  };
}

api::HttpServerOptions RelayHttpServerOptions() {
  api::HttpServerOptions options;
  options.max_connections = 64;
  options.reserved_paths = {kHealthPath, kMetricsPath};
  return options;
}

}  // namespace dhp::worker
