// RelayMetrics: dhp-relay's Prometheus metrics, served at GET /metrics on --metrics-listen
// (text format 0.0.4; GET /healthz answers "ok"). deploy/prometheus scrapes them and alerts.yml
// uses them; tests/monitoring_test.py checks that every name the rules use is exported here or
// by the controller.
//
//   dhp_relay_heartbeats_total{code}               heartbeats answered to agents, by the answer's
//                                                  status code (OK, NOT_FOUND, ..., UNAVAILABLE
//                                                  when the controller could not be reached,
//                                                  RESOURCE_EXHAUSTED when the queue was full,
//                                                  INVALID_ARGUMENT when the request did not
//                                                  decode)
//   dhp_relay_batches_total{code}                  HeartbeatBatch calls to the controller, by
//                                                  the call's own outcome
//   dhp_relay_batch_heartbeats                     histogram: heartbeats per HeartbeatBatch call
//   dhp_relay_batch_duration_seconds               histogram: a HeartbeatBatch call's latency
//   dhp_relay_heartbeat_duration_seconds           histogram: from a heartbeat's arrival to its
//                                                  answer (the window, the queue and the call)
//   dhp_relay_queued_heartbeats                    gauge: heartbeats waiting for their batch
//
// Thread-safety: everything is thread-safe.
#ifndef DHP_WORKER_RELAY_RELAY_METRICS_H_
#define DHP_WORKER_RELAY_RELAY_METRICS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "api/http_server.h"
#include "common/metrics_exposition.h"
#include "worker/relay/heartbeat_batcher.h"

namespace dhp::worker {

class RelayMetrics final : public HeartbeatBatcherObserver {
 public:
  RelayMetrics();

  void OnBatch(int heartbeats, double seconds, absl::StatusCode code) override;
  void OnAnswer(absl::StatusCode code, double seconds) override;
  // Read at every scrape for dhp_relay_queued_heartbeats (HeartbeatBatcher::queued).
  void SetQueued(std::function<int64_t()> queued);

  std::string RenderText() const { return metrics_.RenderText(); }

 private:
  MetricsExposition metrics_;
  prometheus::Family<prometheus::Counter>& heartbeats_;
  prometheus::Family<prometheus::Counter>& batches_;
  prometheus::Family<prometheus::Histogram>& batch_size_;
  prometheus::Family<prometheus::Histogram>& batch_seconds_;
  prometheus::Family<prometheus::Histogram>& heartbeat_seconds_;
  prometheus::Histogram& batch_size_all_;
  prometheus::Histogram& batch_seconds_all_;
  prometheus::Histogram& heartbeat_seconds_all_;
  ComputedGauges& queued_;
};

// The relay's HTTP handler: GET /metrics and /healthz; 404 for other paths, 405 for
// other methods.
api::HttpHandler RelayHttpHandler(const RelayMetrics& metrics);

// dhp-relay's --metrics-listen server options (address and port still to set): at most 64
// connections, and past them the reserved ones answer /healthz and /metrics only, so that
// health checks and scrapes still get through while idle clients hold every regular slot.
api::HttpServerOptions RelayHttpServerOptions();

}  // namespace dhp::worker

#endif  // DHP_WORKER_RELAY_RELAY_METRICS_H_
