// InstrumentedService: a DhpService decorator that counts every call and its latency.
//
//   dhp_api_requests_total{transport="grpc|rest",method="GetJob",code="OK"}
//   dhp_api_request_duration_seconds{transport,method,code}   (histogram)
//   dhp_api_request_wait_seconds{transport,method}   (histogram; dispatched calls only: the
//       time a call waited for the controller's loop before it ran)
//
// A call on the controller's loop (HoldsTheLoop, api/methods.h) that itself runs for
// kSlowCallSeconds or more is logged as a warning (at most one a second), naming the method:
// the calls queued behind it on the loop waited that long. A watch stream or a log read is not.
//
// Each transport wraps the same inner service in its own decorator (same families, its own
// transport label), so both are measured identically. Thread-safe if the inner service is.
#ifndef DHP_API_INSTRUMENTED_SERVICE_H_
#define DHP_API_INSTRUMENTED_SERVICE_H_

#include <string>
#include <string_view>

#include "api/service.h"
#include "common/metrics_exposition.h"

namespace dhp::api {

struct ApiMetrics {
  explicit ApiMetrics(MetricsExposition& metrics);
  // Counts one answered call and its latency.
  void Record(const std::string& transport, const std::string& method, const std::string& code,
              double seconds);

  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Family<prometheus::Histogram>& latency;
  prometheus::Family<prometheus::Histogram>& wait;
};

inline constexpr double kSlowCallSeconds = 0.05;

// Counts a REST request the gateway answered without calling the service (a bad query
// parameter, a body that does not parse, no token, an unknown route, a body too large; see
// RestRequestObserver) as transport "rest", method `route`, and the code of its HTTP status
// (400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND, 405 UNIMPLEMENTED,
// 408 DEADLINE_EXCEEDED, 413 RESOURCE_EXHAUSTED, 415 INVALID_ARGUMENT, 503 UNAVAILABLE).
// Answers below 400 are not counted (health, metrics and the OpenAPI document).
void CountGatewayAnswer(ApiMetrics& metrics, std::string_view route, int http_status,
                        double seconds);

class InstrumentedService : public DhpService {
 public:
  InstrumentedService(DhpService& inner, ApiMetrics& metrics, std::string transport);

#define DHP_INSTRUMENTED_UNARY(S, M, A, V, P, D) \
  absl::Status M(const v1::M##Request& req, v1::M##Response* resp) override;
  DHP_UNARY_METHODS(DHP_INSTRUMENTED_UNARY)
#undef DHP_INSTRUMENTED_UNARY
  absl::Status WatchJob(const v1::WatchJobRequest& req, EventSink& sink) override;
  absl::Status Health() override;
  std::string MetricsText() override { return inner_.MetricsText(); }
  // Forwards to the inner service; a call measured inside counts from here, so that its
  // latency includes the time it waited to run.
  void Dispatch(std::function<absl::Status()> call, Done done, Lane lane) override;
  // Forwards; a request it refuses is counted as a SubmitJob call with that code.
  absl::Status PrepareSubmitJob(v1::SubmitJobRequest* req) override;
  // Forward; counted when `done` runs, with the time waited (no slow-call warning: waiting is
  // what they are for).
  void KvGetAsync(const v1::KvGetRequest& req, v1::KvGetResponse* resp, Done done,
                  std::shared_ptr<CancelSignal> cancel) override;
  // Counts the call and observes its wait (until `taken`), as for a dispatched call.
  void SubmitJobAsync(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp, Done done,
                      std::function<void()> taken) override;
  void KvWaitAsync(const v1::KvWaitRequest& req, v1::KvWaitResponse* resp, Done done,
                   std::shared_ptr<CancelSignal> cancel) override;

 private:
  // `done`, counting the call as `method` from now until it runs.
  Done Counted(const char* method, Done done);
  template <typename F>
  absl::Status Measure(const char* method, F&& call);

  DhpService& inner_;
  ApiMetrics& metrics_;
  const std::string transport_;
};

}  // namespace dhp::api

#endif  // DHP_API_INSTRUMENTED_SERVICE_H_
