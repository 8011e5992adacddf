// The fixture of the API tests (api_test.cc, api_input_test.cc): one real controller, in
// process, with its gRPC server and REST gateway on loopback, and a client of each.
#ifndef DHP_TESTS_API_TEST_FIXTURE_H_
#define DHP_TESTS_API_TEST_FIXTURE_H_

#include <memory>
#include <string>

#include "api/client.h"
#include "api/grpc_server.h"
#include "api/instrumented_service.h"
#include "api/rest_gateway.h"
#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "controller/controller.h"
#include "controller/store.h"
#include "gtest/gtest.h"
#include "tests/grpc_raw.h"
#include "tests/http_client.h"

namespace dhp::api_test {

using tests::HttpClient;
using tests::HttpResponse;
using tests::Lines;

// Two ranks forming one tensor-parallel group: the 1-slot node some tests register cannot run
// it, so jobs stay QUEUED (tests/runs_test.py covers jobs that run).
inline std::string SpecYaml(const std::string& name) {
  return "name: " + name +
         "\nmodel: {preset: tiny}\ntraining: {max_steps: 10}\n"
         "vision: {parallelism: sequence, degree: 2}\ntext: {parallelism: tensor, degree: 2}\n"
         "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";
}

inline constexpr char kBadSpec[] =
    "name: bad\nmodel: {preset: tiny}\nvision: {parallelism: sequence, degree: 3}\n"
    "training: {max_steps: 10}\n"
    "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";
inline constexpr char kBadSpecMessage[] =
    "vision.degree: 3 does not divide the 4 attention heads of the tiny vision encoder";

// The error body the REST gateway sends for `status`.
inline std::string ErrorBody(const absl::Status& status) { return api::StatusToJson(status) + "\n"; }

inline bool HasLine(const std::string& text, const std::string& line) {
  for (const std::string& l : Lines(text)) {
    if (l == line) return true;
  }
  return false;
}

using tests::BufferBytes;
using tests::BytesBuffer;
using tests::GenericUnary;
using tests::Step;

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<controller::Store>> store = controller::Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    controller_ = std::make_unique<controller::Controller>(*store_, clock_, metrics_,
                                                           controller::ControllerOptions());
    controller_->Start();
    api_metrics_ = std::make_unique<api::ApiMetrics>(metrics_);
    grpc_service_ = std::make_unique<api::InstrumentedService>(*controller_, *api_metrics_, "grpc");
    rest_service_ = std::make_unique<api::InstrumentedService>(*controller_, *api_metrics_, "rest");

    absl::StatusOr<std::unique_ptr<api::GrpcServer>> grpc =
        api::GrpcServer::Start("127.0.0.1:0", *grpc_service_);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = std::move(*grpc);
    ASSERT_GT(grpc_->port(), 0);

    api::RestGatewayOptions options;
    options.address = "127.0.0.1";
    options.port = 0;
    rest_ = std::make_unique<api::RestGateway>(*rest_service_, options);
    ASSERT_TRUE(rest_->Start().ok());
    ASSERT_GT(rest_->port(), 0);

    target_ = "127.0.0.1:" + std::to_string(grpc_->port());
    client_ = std::make_unique<api::DhpClient>(target_, 10000);
    http_ = std::make_unique<HttpClient>(rest_->port());
  }

  void TearDown() override {
    http_.reset();
    if (rest_) rest_->Stop();
    if (grpc_) grpc_->Shutdown(0);
    if (controller_) controller_->Stop();
  }

  v1::Job SubmitGrpc(const std::string& name) {
    v1::SubmitJobRequest req;
    req.set_spec_text(SpecYaml(name));
    absl::StatusOr<v1::SubmitJobResponse> resp = client_->SubmitJob(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->job() : v1::Job();
  }
  absl::StatusOr<v1::GetJobResponse> GetGrpc(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    return client_->GetJob(req);
  }

  // Declared in dependency order: destroyed clients first, the registry last.
  SystemClock clock_;
  MetricsExposition metrics_;
  std::unique_ptr<controller::Store> store_;
  std::unique_ptr<controller::Controller> controller_;
  std::unique_ptr<api::ApiMetrics> api_metrics_;
  std::unique_ptr<api::InstrumentedService> grpc_service_;
  std::unique_ptr<api::InstrumentedService> rest_service_;
  std::unique_ptr<api::GrpcServer> grpc_;
  std::unique_ptr<api::RestGateway> rest_;
  std::string target_;
  std::unique_ptr<api::DhpClient> client_;
  std::unique_ptr<HttpClient> http_;
};

}  // namespace dhp::api_test

#endif  // DHP_TESTS_API_TEST_FIXTURE_H_
