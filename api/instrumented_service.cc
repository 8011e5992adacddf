#include "api/instrumented_service.h"

#include <atomic>
#include <chrono>
#include <optional>

#include "absl/status/status.h"
#include "api/methods.h"
#include "common/logging.h"

namespace dhp::api {

ApiMetrics::ApiMetrics(MetricsExposition& metrics)
    : requests(metrics.AddCounter("dhp_api_requests_total",
                                  "API requests by transport, method and status code.")),
      latency(metrics.AddHistogram("dhp_api_request_duration_seconds",
                                   "API request latency by transport, method and status code.")),
      wait(metrics.AddHistogram("dhp_api_request_wait_seconds",
                                "Time a dispatched API call waited for the controller's loop "
                                "before it ran, by transport and method.")) {}

void ApiMetrics::Record(const std::string& transport, const std::string& method,
                        const std::string& code, double seconds) {
  const prometheus::Labels labels = {{"transport", transport}, {"method", method}, {"code", code}};
  requests.Add(labels).Increment();
  latency.Add(labels, LatencyBuckets()).Observe(seconds);
}

void CountGatewayAnswer(ApiMetrics& metrics, std::string_view route, int http_status,
                        double seconds) {
  if (http_status < 400) return;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  switch (http_status) {
    case 400:
    case 415:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case 401:
      code = absl::StatusCode::kUnauthenticated;
      break;
    case 404:
      code = absl::StatusCode::kNotFound;
      break;
    case 405:
      code = absl::StatusCode::kUnimplemented;
      break;
    case 408:
      code = absl::StatusCode::kDeadlineExceeded;
      break;
    case 413:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case 503:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      code = http_status >= 500 ? absl::StatusCode::kInternal : absl::StatusCode::kUnknown;
  }
  metrics.Record("rest", std::string(route), absl::StatusCodeToString(code), seconds);
}

InstrumentedService::InstrumentedService(DhpService& inner, ApiMetrics& metrics,
                                         std::string transport)
    : inner_(inner), metrics_(metrics), transport_(std::move(transport)) {}

namespace {

// While a dispatched call runs: when it was dispatched (calls run on one thread at a time).
thread_local std::optional<std::chrono::steady_clock::time_point> dispatched_at;

}  // namespace

void InstrumentedService::Dispatch(std::function<absl::Status()> call, Done done, Lane lane) {
  inner_.Dispatch(
      [call = std::move(call), start = std::chrono::steady_clock::now()] {
        dispatched_at = start;
        absl::Status s = call();
        dispatched_at.reset();
        return s;
      },
      std::move(done), lane);
}

namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Logs a call that ran kSlowCallSeconds or more, at most once a second (process-wide).
void WarnIfSlow(const char* method, double ran_seconds) {
  static std::atomic<int64_t> last_warned_ms{0};
  if (ran_seconds < kSlowCallSeconds) return;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  int64_t last = last_warned_ms.load();
  if (now_ms - last < 1000 || !last_warned_ms.compare_exchange_strong(last, now_ms)) return;
  DHP_LOG(WARNING) << "API call " << method << " ran for " << static_cast<int>(ran_seconds * 1000)
                   << " ms; calls queued behind it waited meanwhile";
}

}  // namespace

template <typename F>
absl::Status InstrumentedService::Measure(const char* method, F&& call) {
  const auto ran_from = std::chrono::steady_clock::now();
  const auto start = dispatched_at.value_or(ran_from);
  if (dispatched_at.has_value()) {
    metrics_.wait.Add({{"transport", transport_}, {"method", method}}, LatencyBuckets())
        .Observe(Seconds(ran_from - start));
  }
  absl::Status s = call();
  const auto end = std::chrono::steady_clock::now();
  metrics_.Record(transport_, method, absl::StatusCodeToString(s.code()), Seconds(end - start));
  if (HoldsTheLoop(method)) WarnIfSlow(method, Seconds(end - ran_from));
  return s;
}

#define DHP_MEASURED(S, M, A, V, P, D)                                                 \
  absl::Status InstrumentedService::M(const v1::M##Request& req, v1::M##Response* resp) { \
    return Measure(#M, [&] { return inner_.M(req, resp); });                            \
  }
DHP_UNARY_METHODS(DHP_MEASURED)
#undef DHP_MEASURED

absl::Status InstrumentedService::PrepareSubmitJob(v1::SubmitJobRequest* req) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = inner_.PrepareSubmitJob(req);
  if (!s.ok()) {
    metrics_.Record(transport_, "SubmitJob", absl::StatusCodeToString(s.code()),
                    Seconds(std::chrono::steady_clock::now() - start));
  }
  return s;
}

DhpService::Done InstrumentedService::Counted(const char* method, Done done) {
  return [this, method, done = std::move(done),
          start = std::chrono::steady_clock::now()](const absl::Status& s) {
    metrics_.Record(transport_, method, absl::StatusCodeToString(s.code()),
                    Seconds(std::chrono::steady_clock::now() - start));
    done(s);
  };
}

void InstrumentedService::SubmitJobAsync(const v1::SubmitJobRequest& req,
                                         v1::SubmitJobResponse* resp, Done done,
                                         std::function<void()> taken) {
  const auto start = std::chrono::steady_clock::now();
  inner_.SubmitJobAsync(
      req, resp, Counted("SubmitJob", std::move(done)), [this, start, taken = std::move(taken)] {
        metrics_.wait.Add({{"transport", transport_}, {"method", "SubmitJob"}}, LatencyBuckets())
            .Observe(Seconds(std::chrono::steady_clock::now() - start));
        if (taken) taken();
      });
}

void InstrumentedService::KvGetAsync(const v1::KvGetRequest& req, v1::KvGetResponse* resp,
                                     Done done, std::shared_ptr<CancelSignal> cancel) {
  inner_.KvGetAsync(req, resp, Counted("KvGet", std::move(done)), std::move(cancel));
}

void InstrumentedService::KvWaitAsync(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp,
                                      Done done, std::shared_ptr<CancelSignal> cancel) {
  inner_.KvWaitAsync(req, resp, Counted("KvWait", std::move(done)), std::move(cancel));
}

absl::Status InstrumentedService::WatchJob(const v1::WatchJobRequest& req, EventSink& sink) {
  return Measure("WatchJob", [&] { return inner_.WatchJob(req, sink); });
}

absl::Status InstrumentedService::Health() {
  return Measure("Health", [&] { return inner_.Health(); });
}

}  // namespace dhp::api
