// Bad input on both transports (the fixture: api_test_fixture.h): an invalid spec gets the same
// message over gRPC and REST, text that is not UTF-8 is refused at every entry point without
// damaging what is stored, and bodies follow their content type.
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "common/proto_yaml.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/api_test_fixture.h"

namespace dhp {
namespace {

using api_test::ApiTest;
using api_test::ErrorBody;
using api_test::HasLine;
using api_test::SpecYaml;
using api_test::kBadSpec;
using api_test::kBadSpecMessage;
using tests::GenericUnary;
using tests::HttpResponse;
using tests::Lines;

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
      [](const absl::Status&) {}, api::Lane::kUser);
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

// Text that is not UTF-8 does not parse as protobuf: INVALID_ARGUMENT naming the field (gRPC
// itself would answer UNIMPLEMENTED with no message), on the loop's methods and the blocking ones
// alike, and nothing is stored.
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


}  // namespace
}  // namespace dhp
