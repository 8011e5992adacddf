// Both transports against one real controller, in process, on loopback: gRPC (DhpClient, and
// grpc::GenericStub for the health and reflection services) and REST (a Beast client). They
// must agree on data (the same JSON), on errors (the same message, the matching HTTP status),
// and on events; /metrics must count both and pass `promtool check metrics`.
// Bad input on both transports: api_input_test.cc.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/proto_yaml.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
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
using tests::BufferBytes;
using tests::BytesBuffer;
using tests::GenericUnary;
using tests::HttpClient;
using tests::HttpResponse;
using tests::Lines;
using tests::Step;

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

// A watch stream lasts as long as its client follows, on a thread of its own: its length is
// not time the loop spent on it, and is not logged as a slow call that held the others up.
TEST_F(ApiTest, AFollowedWatchIsNotLoggedAsACallThatHeldTheLoop) {
  const v1::Job job = SubmitGrpc("followed");
  v1::WatchJobRequest req;
  req.set_job_id(job.id());
  req.set_follow(true);
  std::atomic<int> events{0};
  ::testing::internal::CaptureStderr();
  std::future<absl::Status> watch = std::async(std::launch::async, [&] {
    return client_->WatchJob(req, [&](const v1::Event&) {
      ++events;
      return true;
    });
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (events.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past kSlowCallSeconds
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job.id());
  ASSERT_TRUE(client_->CancelJob(cancel).ok());
  const absl::Status watched = watch.get();  // the job is final: the stream ends
  const std::string logged = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(watched.ok()) << watched;
  EXPECT_GE(events.load(), 2);  // the submit and the cancel, at least
  EXPECT_EQ(logged.find("API call WatchJob ran for"), std::string::npos) << logged;
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
