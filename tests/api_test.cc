// Both transports against one real controller, in process, on loopback: gRPC (DhpClient, and
// grpc::GenericStub for the health and reflection services) and REST (a Beast client). They
// must agree on data (the same JSON), on errors (the same message, the matching HTTP status),
// and on events; /metrics must count both and pass `promtool check metrics`.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "api/client.h"
#include "api/grpc_server.h"
#include "api/instrumented_service.h"
#include "api/rest_gateway.h"
#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "common/proto_yaml.h"
#include "controller/controller.h"
#include "controller/store.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/grpc_raw.h"
#include "tests/http_client.h"

namespace dhp {
namespace {

using tests::HttpClient;
using tests::HttpResponse;
using tests::Lines;

// Two ranks forming one tensor-parallel group: the 1-slot node some tests register cannot run
// it, so jobs stay QUEUED (tests/runs_test.py covers jobs that run).
std::string SpecYaml(const std::string& name) {
  return "name: " + name +
         "\nmodel: {preset: tiny}\ntraining: {max_steps: 10}\n"
         "vision: {parallelism: sequence, degree: 2}\ntext: {parallelism: tensor, degree: 2}\n"
         "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";
}

constexpr char kBadSpec[] =
    "name: bad\nmodel: {preset: tiny}\nvision: {parallelism: sequence, degree: 3}\n"
    "training: {max_steps: 10}\n"
    "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";
constexpr char kBadSpecMessage[] =
    "vision.degree: 3 does not divide the 4 attention heads of the tiny vision encoder";

// The error body the REST gateway sends for `status`.
std::string ErrorBody(const absl::Status& status) { return api::StatusToJson(status) + "\n"; }

bool HasLine(const std::string& text, const std::string& line) {
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

TEST_F(ApiTest, JobSubmittedOverGrpcReadsTheSameOverRest) {
  const v1::Job job = SubmitGrpc("grpc-job");
  absl::StatusOr<v1::GetJobResponse> got = GetGrpc(job.id());
  ASSERT_TRUE(got.ok()) << got.status();
  HttpResponse res = http_->Get("/v1/jobs/" + job.id());
  ASSERT_EQ(res.status, 200) << res.error << res.body;
  EXPECT_EQ(res.content_type, "application/json");
  EXPECT_EQ(res.body, ProtoToJson(*got) + "\n");

  // And the REST JSON parses back to the very message gRPC returned.
  v1::GetJobResponse parsed;
  ASSERT_TRUE(ParseProtoYaml(res.body, &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), got->SerializeAsString());
}

TEST_F(ApiTest, YamlSubmittedOverRestIsListedOverGrpc) {
  HttpResponse res = http_->Post("/v1/jobs", SpecYaml("rest-job"), "application/yaml");
  ASSERT_EQ(res.status, 200) << res.error << res.body;
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(ParseProtoYaml(res.body, &submitted).ok()) << res.body;
  EXPECT_EQ(submitted.job().state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(submitted.job().spec().name(), "rest-job");

  absl::StatusOr<v1::ListJobsResponse> list = client_->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs_size(), 1);
  EXPECT_EQ(list->jobs(0).id(), submitted.job().id());
  EXPECT_EQ(list->jobs(0).SerializeAsString(), submitted.job().SerializeAsString());

  // The REST list filter reads the same store.
  res = http_->Get("/v1/jobs?state=queued");
  ASSERT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(res.body, ProtoToJson(*list) + "\n");
}

TEST_F(ApiTest, AnInvalidSpecGivesTheSameMessageOnBothTransports) {
  v1::SubmitJobRequest req;
  req.set_spec_text(kBadSpec);
  absl::StatusOr<v1::SubmitJobResponse> grpc = client_->SubmitJob(req);
  ASSERT_FALSE(grpc.ok());
  EXPECT_EQ(grpc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(grpc.status().message(), kBadSpecMessage);

  HttpResponse res = http_->Post("/v1/jobs", kBadSpec, "application/yaml");
  EXPECT_EQ(res.status, 400);
  EXPECT_EQ(res.content_type, "application/json");
  EXPECT_EQ(res.body, ErrorBody(grpc.status()));
  EXPECT_EQ(res.body, "{\"code\": 3, \"status\": \"INVALID_ARGUMENT\", \"message\": \"" +
                          std::string(kBadSpecMessage) + "\"}\n");

  absl::StatusOr<v1::ListJobsResponse> list = client_->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs_size(), 0);
}

// gRPC parses and validates a spec on its own thread (DhpService::PrepareSubmitJob) before it
// hands the call to the loop: with the loop held, an invalid spec is still answered at once
// (counted, never dispatched), while a valid one waits for the loop and is then stored.
TEST_F(ApiTest, GrpcRefusesAnInvalidSpecWithoutWaitingForTheLoop) {
  std::promise<void> holding;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  controller_->Dispatch(
      [&holding, released] {
        holding.set_value();
        released.wait();
        return absl::OkStatus();
      },
      [](const absl::Status&) {});
  holding.get_future().wait();
  struct Release {
    std::promise<void>& p;
    bool done = false;
    void operator()() {
      if (!done) p.set_value();
      done = true;
    }
    ~Release() { (*this)(); }
  } let_go{release};

  api::DhpClient quick(target_, 3000);
  v1::SubmitJobRequest bad;
  bad.set_spec_text(kBadSpec);
  absl::StatusOr<v1::SubmitJobResponse> refused = quick.SubmitJob(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_EQ(refused.status().message(), kBadSpecMessage);

  std::future<absl::StatusOr<v1::SubmitJobResponse>> good = std::async(std::launch::async, [&] {
    v1::SubmitJobRequest req;
    req.set_spec_text(SpecYaml("after-the-loop"));
    return client_->SubmitJob(req);
  });
  EXPECT_EQ(good.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  let_go();
  absl::StatusOr<v1::SubmitJobResponse> stored = good.get();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->job().spec().name(), "after-the-loop");
  EXPECT_EQ(stored->job().state(), v1::JOB_STATE_QUEUED);

  const std::string text = http_->Get("/metrics").body;
  for (const char* line : {
           R"(dhp_api_requests_total{code="INVALID_ARGUMENT",method="SubmitJob",)"
           R"(transport="grpc"} 1)",
           R"(dhp_api_requests_total{code="OK",method="SubmitJob",transport="grpc"} 1)",
           R"(dhp_api_request_wait_seconds_count{method="SubmitJob",transport="grpc"} 1)",
       }) {
    EXPECT_TRUE(HasLine(text, line)) << line << "\n" << text;
  }
}

// Bytes that are not UTF-8, in a YAML spec, in a JSON body's spec text, or in a cancel reason,
// are 400 naming the byte, and nothing is stored: before, a REST spec with \xff in
// model.weights_path was stored and every later listing failed with DATA_LOSS.
TEST_F(ApiTest, IllFormedUtf8Is400AndDamagesNothing) {
  const v1::Job kept = SubmitGrpc("kept");
  std::string yaml = SpecYaml("bad-bytes");
  yaml += "labels: {owner: \"a\xff" "b\"}\n";
  HttpResponse res = http_->Post("/v1/jobs", yaml, "application/yaml");
  EXPECT_EQ(res.status, 400) << res.body;
  EXPECT_NE(res.body.find("request body (YAML): labels.owner: not valid UTF-8: byte 0xFF"),
            std::string::npos)
      << res.body;
  res = http_->Post("/v1/jobs", "{\"spec_text\": \"name: x\xc3\"}");
  EXPECT_EQ(res.status, 400) << res.body;
  EXPECT_NE(res.body.find("request body (JSON): spec_text: not valid UTF-8: byte 0xC3"),
            std::string::npos)
      << res.body;
  res = http_->Post("/v1/jobs/" + kept.id() + ":cancel", "{\"reason\": \"\xed\xa0\x80\"}");
  EXPECT_EQ(res.status, 400) << res.body;

  absl::StatusOr<v1::ListJobsResponse> list = client_->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs_size(), 1);
  EXPECT_EQ(list->jobs(0).id(), kept.id());
  EXPECT_EQ(list->jobs(0).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(http_->Get("/v1/jobs").status, 200);
}

// Every REST route that takes text refuses bytes that are not UTF-8 with a 400 naming the field
// (or the path segment, or the query parameter), and nothing reaches the store: the issue found
// a node hostname, a cancel reason and a label value that, once stored, crashed the controller
// or failed every listing.
TEST_F(ApiTest, EveryRestEntryPointRefusesTextThatIsNotUtf8) {
  const std::string job = SubmitGrpc("kept").id();
  const size_t events_before = Lines(http_->Get("/v1/events").body).size();
  struct Case {
    std::string path;
    std::string body;
    std::string field;  // as named in the message
  };
  const std::string x = "\xff";
  const std::vector<Case> cases = {
      {"/v1/jobs", "{\"spec_text\": \"name: a" + x + "\"}", "spec_text"},
      {"/v1/jobs", "{\"spec\": {\"name\": \"x\", \"labels\": {\"team\": \"ab" + x + "cd\"}}}",
       "spec.labels.team"},
      {"/v1/jobs", "{\"spec\": {\"name\": \"n" + x + "\"}}", "spec.name"},
      {"/v1/jobs/" + job + ":cancel", "{\"reason\": \"x" + x + "y\"}", "reason"},
      {"/v1/jobs/" + job + ":resume", "{\"job_id\": \"" + x + "\"}", "job_id"},
      {"/v1/jobs/" + job + "/progress", "{\"rank\": 0, \"metrics\": {\"lo" + x + "ss\": 1}}",
       "metrics.lo\xEF\xBF\xBDss (the key)"},
      {"/v1/jobs/" + job + "/progress", "{\"waiting_on\": \"all_reduce" + x + "\"}",
       "waiting_on"},
      {"/v1/jobs/" + job + "/checkpoints", "{\"attempt\": 1, \"path\": \"/c" + x + "k\"}",
       "path"},
      {"/v1/jobs/" + job + "/checkpoints", "{\"shard\": {\"file\": \"f" + x + "\"}}",
       "shard.file"},
      {"/v1/jobs/" + job + "/checkpoints:reject", "{\"reason\": \"bad" + x + "\"}", "reason"},
      {"/v1/nodes:register", "{\"node\": {\"id\": \"n1\", \"hostname\": \"h" + x + "ost\"}}",
       "node.hostname"},
      {"/v1/nodes:register", "{\"node\": {\"id\": \"n" + x + "\"}}", "node.id"},
      {"/v1/nodes/n1:heartbeat", "{\"ranks\": [{\"job_id\": \"j" + x + "\"}]}",
       "ranks[0].job_id"},
      {"/v1/nodes/n1:heartbeat", "{\"ranks\": [{\"log_tail\": \"t" + x + "\"}]}",
       "ranks[0].log_tail"},
      {"/v1/nodes/n1/logs", "{\"chunks\": [{\"job_id\": \"j" + x + "\"}]}", "chunks[0].job_id"},
      {"/v1/kv:set", "{\"scope\": {\"job_id\": \"j" + x + "\"}, \"key\": \"k\"}",
       "scope.job_id"},
      {"/v1/kv:get", "{\"key\": \"k" + x + "\"}", "key"},
      {"/v1/kv:add", "{\"key\": \"k" + x + "\"}", "key"},
      {"/v1/kv:wait", "{\"keys\": [\"a\", \"k" + x + "\"]}", "keys[1]"},
      {"/v1/kv:check", "{\"keys\": [\"k" + x + "\"]}", "keys[0]"},
      {"/v1/kv:delete", "{\"key\": \"k" + x + "\"}", "key"},
  };
  for (const Case& c : cases) {
    HttpResponse res = http_->Post(c.path, c.body);
    EXPECT_EQ(res.status, 400) << c.path << " " << c.field << ": " << res.body;
    EXPECT_NE(res.body.find("request body (JSON): " + c.field + ": not valid UTF-8: byte 0xFF"),
              std::string::npos)
        << c.path << ": " << res.body;
  }
  // A YAML spec, the path and the query.
  HttpResponse res = http_->Post("/v1/jobs", SpecYaml("y") + "labels: {team: \"a" + x + "\"}\n",
                                 "application/yaml");
  EXPECT_EQ(res.status, 400);
  EXPECT_NE(res.body.find("request body (YAML): labels.team: not valid UTF-8"), std::string::npos)
      << res.body;
  for (const std::string& path :
       {std::string("/v1/jobs/%FF"), std::string("/v1/jobs/%FF:cancel"),
        std::string("/v1/jobs/%FF/events"), std::string("/v1/nodes/n%C3:heartbeat")}) {
    res = path.find(":") != std::string::npos ? http_->Post(path, "") : http_->Get(path);
    EXPECT_EQ(res.status, 400) << path << ": " << res.body;
    EXPECT_NE(res.body.find("path: the id: not valid UTF-8: byte 0x"), std::string::npos)
        << path << ": " << res.body;
  }
  for (const std::string& query : {std::string("/v1/jobs?label=team=%FF"),
                                   std::string("/v1/jobs?page_token=%FF"),
                                   std::string("/v1/jobs/" + job + "/logs?rank=%FF")}) {
    res = http_->Get(query);
    EXPECT_EQ(res.status, 400) << query << ": " << res.body;
    EXPECT_NE(res.body.find("not valid UTF-8: byte 0xFF"), std::string::npos) << res.body;
    EXPECT_NE(res.body.find("query parameter "), std::string::npos) << res.body;
  }

  // Nothing was stored, and everything still reads.
  absl::StatusOr<v1::ListJobsResponse> list = client_->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs_size(), 1);
  EXPECT_EQ(list->jobs(0).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(list->jobs(0).id(), job);
  absl::StatusOr<v1::ListNodesResponse> nodes = client_->ListNodes(v1::ListNodesRequest());
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(nodes->nodes_size(), 0);
  EXPECT_EQ(Lines(http_->Get("/v1/events").body).size(), events_before);
  EXPECT_EQ(http_->Get("/v1/jobs").status, 200);
  EXPECT_TRUE(store_->ListQuarantined().empty());
}

// A request of many small elements is refused before it is parsed: 300,000 empty progress
// reports are 600 KB on the wire and would be ~70 MB parsed (8 million, 1.8 GB, fit in 16 MiB).
TEST_F(ApiTest, GrpcRefusesARequestOfTooManyElementsUnparsed) {
  v1::HeartbeatRequest hb;
  hb.set_node_id("n1");
  for (int i = 0; i < 300000; ++i) hb.add_progress();
  auto [status, body] =
      GenericUnary(target_, "/dhp.v1.WorkerService/Heartbeat", hb.SerializeAsString());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_EQ(status.error_message(),
            "request (protobuf dhp.v1.HeartbeatRequest): more than 262144 messages, strings and "
            "bytes fields in 600004 bytes; send fewer per request");
  v1::ListNodesRequest list;  // the server goes on
  status = GenericUnary(target_, "/dhp.v1.NodeService/ListNodes", list.SerializeAsString()).first;
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// gRPC refuses such bytes on the wire (the message does not parse), so the transports agree.
// Bytes protobuf will not parse are INVALID_ARGUMENT naming the field (gRPC itself would answer
// UNIMPLEMENTED with no message), on the loop's methods and the blocking ones alike, and nothing
// is stored.
TEST_F(ApiTest, GrpcRefusesTextThatIsNotUtf8) {
  v1::RegisterNodeRequest req;
  req.mutable_node()->set_id("n1");
  req.mutable_node()->set_hostname("h\xffost");
  auto [status, body] =
      GenericUnary(target_, "/dhp.v1.WorkerService/RegisterNode", req.SerializeAsString());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(status.error_message(),
            "request (protobuf dhp.v1.RegisterNodeRequest): node.hostname: not valid UTF-8: byte "
            "0xFF at line 1, column 2 (offset 1)");

  v1::KvGetRequest get;  // a method run off the loop
  get.mutable_scope()->set_job_id("j\xc3");
  status = GenericUnary(target_, "/dhp.v1.WorkerService/KvGet", get.SerializeAsString()).first;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("scope.job_id: not valid UTF-8: byte 0xC3"),
            std::string::npos)
      << status.error_message();

  status = GenericUnary(target_, "/dhp.v1.JobService/SubmitJob", "\xff\xff\xff\xff").first;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(status.error_message(),
            "request (protobuf dhp.v1.SubmitJobRequest): 4 bytes that do not decode as this "
            "message (truncated, or not protobuf's binary encoding)");

  {  // the streaming method too (the generated stub sends the bad text, with a logged complaint)
    auto stub = v1::JobService::NewStub(
        grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::WatchJobRequest watch;
    watch.set_job_id("j\xff");
    auto reader = stub->WatchJob(&ctx, watch);
    v1::Event event;
    EXPECT_FALSE(reader->Read(&event));
    status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("dhp.v1.WatchJobRequest): job_id: not valid UTF-8"),
              std::string::npos)
        << status.error_message();
  }

  absl::StatusOr<v1::ListNodesResponse> nodes = client_->ListNodes(v1::ListNodesRequest());
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ(nodes->nodes_size(), 0);
  absl::StatusOr<v1::ListJobsResponse> jobs = client_->ListJobs(v1::ListJobsRequest());
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->jobs_size(), 0);
}

// JSON bodies go by the proto JSON mapping and the Content-Type; YAML is for job specs.
TEST_F(ApiTest, BodiesFollowTheirContentType) {
  const v1::Job job = SubmitGrpc("typed");
  HttpResponse res = http_->Post("/v1/jobs/" + job.id() + ":cancel", "reason: x\n",
                                 "application/yaml");
  EXPECT_EQ(res.status, 415) << res.body;
  EXPECT_NE(res.body.find("YAML is taken only for job specs"), std::string::npos) << res.body;
  res = http_->Post("/v1/jobs/" + job.id() + ":cancel", "reason=x",
                    "application/x-www-form-urlencoded");
  EXPECT_EQ(res.status, 415) << res.body;
  res = http_->Post("/v1/jobs", SpecYaml("plain"), "text/plain");
  EXPECT_EQ(res.status, 415) << res.body;
  // Enums by full name (the proto JSON mapping), not YAML's short names.
  res = http_->Post("/v1/jobs?dry_run=true",
                    R"({"spec": {"name": "j", "vision": {"parallelism": "sequence"}}})");
  EXPECT_EQ(res.status, 400) << res.body;
  EXPECT_NE(res.body.find("request body (JSON): spec.vision.parallelism: expected one of"),
            std::string::npos)
      << res.body;
  EXPECT_EQ(Lines(http_->Get("/v1/jobs/" + job.id() + "/events").body).size(), 1u);
  res = http_->Post("/v1/jobs/" + job.id() + ":cancel", R"({"reason": "typed"})",
                    "application/json; charset=utf-8");
  EXPECT_EQ(res.status, 200) << res.body;
}

TEST_F(ApiTest, CancelOverRestIsSeenOverGrpc) {
  const v1::Job job = SubmitGrpc("to-cancel");
  HttpResponse res = http_->Post("/v1/jobs/" + job.id() + ":cancel", R"({"reason": "via rest"})");
  ASSERT_EQ(res.status, 200) << res.error << res.body;
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(ParseProtoYaml(res.body, &cancelled).ok()) << res.body;
  EXPECT_EQ(cancelled.job().state(), v1::JOB_STATE_CANCELLED);

  absl::StatusOr<v1::GetJobResponse> got = GetGrpc(job.id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(got->job().message(), "via rest");
  ASSERT_EQ(got->runs_size(), 1);
  EXPECT_EQ(got->runs(0).state(), v1::RUN_STATE_CANCELLED);

  // Cancelling again: FAILED_PRECONDITION over gRPC, 409 over REST, one message.
  v1::CancelJobRequest again;
  again.set_job_id(job.id());
  absl::StatusOr<v1::CancelJobResponse> grpc = client_->CancelJob(again);
  ASSERT_FALSE(grpc.ok());
  EXPECT_EQ(grpc.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(grpc.status().message(), "cannot cancel job " + job.id() +
                                         ": job is already CANCELLED; there is nothing to cancel");
  res = http_->Post("/v1/jobs/" + job.id() + ":cancel");
  EXPECT_EQ(res.status, 409);
  EXPECT_EQ(res.body, ErrorBody(grpc.status()));
}

// Issue 15 §2: POST :resume takes the new layout as its JSON body. A layout the spec rules
// refuse is a 400 with gRPC's message, naming the field, and changes nothing; a good one is
// stored on the job, and gRPC reads it back; an empty body keeps the layout.
TEST_F(ApiTest, ResumeOverRestTakesANewLayout) {
  const v1::Job job = SubmitGrpc("relayout");  // vision 2 x text 2 x dp 1
  ASSERT_EQ(http_->Post("/v1/jobs/" + job.id() + ":cancel").status, 200);
  absl::StatusOr<v1::GetJobResponse> before = GetGrpc(job.id());
  ASSERT_TRUE(before.ok()) << before.status();

  const std::string path = "/v1/jobs/" + job.id() + ":resume";
  HttpResponse res = http_->Post(path, R"({"text_degree": 3})");
  EXPECT_EQ(res.status, 400) << res.body;
  v1::ResumeJobRequest bad;
  bad.set_job_id(job.id());
  bad.set_text_degree(3);
  absl::StatusOr<v1::ResumeJobResponse> grpc = client_->ResumeJob(bad);
  ASSERT_FALSE(grpc.ok());
  EXPECT_EQ(grpc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(grpc.status().message())
                .rfind("resume: text_degree 3: text.degree: 3 does not divide the 4 attention "
                       "heads of tiny",
                       0),
            0u)
      << grpc.status();
  EXPECT_EQ(res.body, ErrorBody(grpc.status()));
  res = http_->Post(path, R"({"vision_degree": -1})");
  EXPECT_EQ(res.status, 400) << res.body;
  EXPECT_NE(res.body.find("resume: vision_degree -1: vision.degree: -1 must be at least 1"),
            std::string::npos)
      << res.body;
  absl::StatusOr<v1::GetJobResponse> after = GetGrpc(job.id());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->SerializeAsString(), before->SerializeAsString());

  res = http_->Post(path, R"({"vision_degree": 4, "textDegree": 4,)"
                          R"( "placement": "PLACEMENT_SEPARATE"})");
  ASSERT_EQ(res.status, 200) << res.body;
  v1::ResumeJobResponse resumed;
  ASSERT_TRUE(ParseProtoYaml(res.body, &resumed).ok()) << res.body;
  EXPECT_EQ(resumed.job().message(),  // the job's message then (the scheduler's comes later)
            "resumed by user from the start (no complete checkpoint) on layout vision 4 (sp) x "
            "text 4 x dp 1, separate (was vision 2 (sp) x text 2 x dp 1, collocated)");
  after = GetGrpc(job.id());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->job().spec().vision().degree(), 4);
  EXPECT_EQ(after->job().spec().text().degree(), 4);
  EXPECT_EQ(after->job().spec().placement(), v1::PLACEMENT_SEPARATE);

  ASSERT_EQ(http_->Post("/v1/jobs/" + job.id() + ":cancel").status, 200);
  res = http_->Post(path, "");  // an empty body: the (new) layout is kept
  ASSERT_EQ(res.status, 200) << res.body;
  ASSERT_TRUE(ParseProtoYaml(res.body, &resumed).ok()) << res.body;
  EXPECT_EQ(resumed.job().message(), "resumed by user from the start (no complete checkpoint)");
  after = GetGrpc(job.id());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->job().current_attempt(), 3);
  EXPECT_EQ(after->job().spec().vision().degree(), 4);
}

TEST_F(ApiTest, AnUnknownJobIsNotFoundOnBothTransports) {
  HttpResponse res = http_->Get("/v1/jobs/unknown");
  EXPECT_EQ(res.status, 404);
  absl::StatusOr<v1::GetJobResponse> grpc = GetGrpc("unknown");
  ASSERT_FALSE(grpc.ok());
  EXPECT_EQ(grpc.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(grpc.status().message(), "job unknown not found");
  EXPECT_EQ(res.body, ErrorBody(grpc.status()));
}

TEST_F(ApiTest, RestWatchSeesTheEventsOfGrpcCalls) {
  const v1::Job job = SubmitGrpc("watched");
  HttpResponse res = http_->StartStream("/v1/jobs/" + job.id() + "/events?follow=true", 1);
  ASSERT_EQ(res.status, 200) << res.error << res.body;
  EXPECT_EQ(res.content_type, "application/x-ndjson");
  ASSERT_EQ(Lines(res.body).size(), 1u) << res.body;

  // A second connection follows everything; a node registered over gRPC shows up there.
  HttpClient all(rest_->port());
  HttpResponse all_res = all.StartStream("/v1/events?follow=true", 1);  // the submit
  ASSERT_EQ(all_res.status, 200) << all_res.error;
  v1::RegisterNodeRequest reg;
  reg.mutable_node()->set_id("n1");
  reg.mutable_node()->mutable_resources()->set_cpu_slots(1);
  ASSERT_TRUE(client_->RegisterNode(reg).ok());
  all_res = all.ReadStream(2);
  ASSERT_EQ(Lines(all_res.body).size(), 2u) << all_res.error << all_res.body;
  v1::Event node_event;
  ASSERT_TRUE(ParseProtoYaml(Lines(all_res.body)[1], &node_event).ok());
  EXPECT_EQ(node_event.node_id(), "n1");
  EXPECT_EQ(node_event.to_state(), "READY");
  all.Close();

  v1::CancelJobRequest cancel;
  cancel.set_job_id(job.id());
  ASSERT_TRUE(client_->CancelJob(cancel).ok());
  res = http_->ReadStream();  // the job is final: the stream ends
  ASSERT_EQ(res.status, 200) << res.error << res.body;
  const std::vector<std::string> lines = Lines(res.body);

  // The same events, byte for byte, as a gRPC replay of the job.
  v1::WatchJobRequest replay;
  replay.set_job_id(job.id());
  std::vector<std::string> grpc_lines;
  ASSERT_TRUE(client_
                  ->WatchJob(replay,
                             [&](const v1::Event& e) {
                               grpc_lines.push_back(ProtoToJson(e));
                               return true;
                             })
                  .ok());
  ASSERT_EQ(grpc_lines.size(), 3u);
  EXPECT_EQ(lines, grpc_lines);
  v1::Event last;
  ASSERT_TRUE(ParseProtoYaml(lines.back(), &last).ok());
  EXPECT_EQ(last.type(), "run.state");
  EXPECT_EQ(last.to_state(), "CANCELLED");
}

// Health/Check for `service` ("" is the server): the status and the response bytes.
std::pair<grpc::Status, std::string> HealthCheck(const std::string& target,
                                                 const std::string& service) {
  // HealthCheckRequest {string service = 1;}
  std::string bytes;
  if (!service.empty()) bytes = std::string("\x0a") + static_cast<char>(service.size()) + service;
  return GenericUnary(target, "/grpc.health.v1.Health/Check", bytes);
}

TEST_F(ApiTest, GrpcHealthCheckIsServing) {
  for (const std::string service :
       {"", "dhp.v1.JobService", "dhp.v1.NodeService", "dhp.v1.WorkerService"}) {
    auto [status, response] = HealthCheck(target_, service);
    ASSERT_TRUE(status.ok()) << service << ": " << status.error_message();
    EXPECT_EQ(response, std::string("\x08\x01", 2)) << service;  // status: SERVING
  }
  EXPECT_EQ(HealthCheck(target_, "dhp.v1.NoSuchService").first.error_code(),
            grpc::StatusCode::NOT_FOUND);

  // REST's health check agrees.
  HttpResponse res = http_->Get("/healthz");
  EXPECT_EQ(res.status, 200);
  EXPECT_EQ(res.body, "ok\n");
}

TEST_F(ApiTest, GrpcServerReflectionListsTheServices) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  int start = 1, write = 2, done = 3, read = 4, finish = 5;
  call->StartCall(&start);
  ASSERT_TRUE(Step(cq, &start));
  call->Write(BytesBuffer(std::string("\x3a\x00", 2)), &write);  // list_services: ""
  ASSERT_TRUE(Step(cq, &write));
  call->WritesDone(&done);
  ASSERT_TRUE(Step(cq, &done));
  std::string replies;
  grpc::ByteBuffer response;
  for (int i = 0; i < 10; ++i) {
    call->Read(&response, &read);
    if (!Step(cq, &read)) break;  // the server ended the stream
    replies += BufferBytes(response);
  }
  grpc::Status status;
  call->Finish(&status, &finish);
  ASSERT_TRUE(Step(cq, &finish));
  EXPECT_TRUE(status.ok()) << status.error_message();
  for (const char* service : {"dhp.v1.JobService", "dhp.v1.NodeService",
                              "dhp.v1.WorkerService", "grpc.health.v1.Health"}) {
    EXPECT_NE(replies.find(service), std::string::npos) << service;
  }
  cq.Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (cq.Next(&ignored_tag, &ignored_ok)) {
  }
}

TEST_F(ApiTest, MetricsCountBothTransportsAndPassPromtool) {
  const v1::Job job = SubmitGrpc("counted");                        // grpc SubmitJob OK
  ASSERT_FALSE(GetGrpc("missing").ok());                            // grpc GetJob NOT_FOUND
  ASSERT_TRUE(GetGrpc(job.id()).ok());                              // grpc GetJob OK
  EXPECT_EQ(http_->Get("/v1/jobs/" + job.id()).status, 200);        // rest GetJob OK
  EXPECT_EQ(http_->Get("/v1/jobs/" + job.id()).status, 200);        // rest GetJob OK
  EXPECT_EQ(http_->Post("/v1/jobs", kBadSpec, "text/yaml").status, 400);  // rest SubmitJob
  EXPECT_EQ(http_->Post("/v1/jobs/" + job.id() + ":cancel").status, 200);  // rest CancelJob

  HttpResponse res = http_->Get("/metrics");
  ASSERT_EQ(res.status, 200) << res.error;
  EXPECT_EQ(res.content_type, "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = res.body;
  for (
      const char* line : {
          "# TYPE dhp_api_requests_total counter",
          R"(dhp_api_requests_total{code="OK",method="SubmitJob",transport="grpc"} 1)",
          R"(dhp_api_requests_total{code="NOT_FOUND",method="GetJob",transport="grpc"} 1)",
          R"(dhp_api_requests_total{code="OK",method="GetJob",transport="grpc"} 1)",
          R"(dhp_api_requests_total{code="OK",method="GetJob",transport="rest"} 2)",
          R"(dhp_api_requests_total{code="INVALID_ARGUMENT",method="SubmitJob",)"
          R"(transport="rest"} 1)",
          R"(dhp_api_requests_total{code="OK",method="CancelJob",transport="rest"} 1)",
          R"(dhp_api_request_duration_seconds_count{code="OK",method="GetJob",transport="grpc"} 1)",
          R"(dhp_api_request_duration_seconds_count{code="NOT_FOUND",method="GetJob",)"
          R"(transport="grpc"} 1)",
          R"(dhp_api_request_duration_seconds_count{code="OK",method="GetJob",transport="rest"} 2)",
          // Calls gRPC hands to the loop (DhpService::Dispatch) also count their wait for it.
          R"(dhp_api_request_wait_seconds_count{method="GetJob",transport="grpc"} 2)",
          R"(dhp_api_request_wait_seconds_count{method="SubmitJob",transport="grpc"} 1)",
          R"(dhp_jobs{state="CANCELLED"} 1)",
          R"(dhp_jobs{state="QUEUED"} 0)",
      }) {
    EXPECT_TRUE(HasLine(text, line)) << line << "\n" << text;
  }
  EXPECT_EQ(text.find(R"(code="OK",method="SubmitJob",transport="rest")"), std::string::npos);
  EXPECT_EQ(text.find(R"(dhp_api_request_wait_seconds_count{method="GetJob",transport="rest"})"),
            std::string::npos);  // REST calls run on its own threads, not dispatched

  // promtool is part of the toolchain (tools/setup.sh): missing, it fails the test unless
  // DHP_NO_PROMTOOL says to skip it.
  if (std::getenv("DHP_NO_PROMTOOL") != nullptr) GTEST_SKIP() << "DHP_NO_PROMTOOL is set";
  const char* promtool = "/usr/bin/promtool";
  ASSERT_EQ(access(promtool, X_OK), 0)
      << promtool << " is missing: run tools/setup.sh (or set DHP_NO_PROMTOOL=1 to skip)";
  FILE* pipe = popen("/usr/bin/promtool check metrics 2>&1", "w");
  ASSERT_NE(pipe, nullptr);
  fwrite(text.data(), 1, text.size(), pipe);
  const int rc = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "promtool exit status " << rc;
}

}  // namespace
}  // namespace dhp
