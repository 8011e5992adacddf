// Tests the REST gateway end to end: a fake DhpService behind a real gateway on 127.0.0.1:0,
// driven by a small synchronous Beast client over real sockets.
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

TEST_F(RestGatewayTest, GetJobPassesPathIdAndReturnsJson) {
  Response res = client_->Get("/v1/jobs/j-42");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(ContentType(res), "application/json");
  EXPECT_EQ(service_.Last<v1::GetJobRequest>().job_id(), "j-42");
  v1::GetJobResponse parsed;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &parsed).ok()) << res.body();
  EXPECT_EQ(parsed.job().id(), "j-42");
  EXPECT_EQ(parsed.job().state(), v1::JOB_STATE_RUNNING);
  EXPECT_NE(res.body().find("\"JOB_STATE_RUNNING\""), std::string::npos) << res.body();
  ASSERT_EQ(parsed.runs_size(), 1);
  EXPECT_TRUE(Observed("GetJob", 200));
}

TEST_F(RestGatewayTest, PercentEncodedPathIdIsDecoded) {
  EXPECT_EQ(client_->Get("/v1/jobs/a%20b").result_int(), 200);
  EXPECT_EQ(service_.Last<v1::GetJobRequest>().job_id(), "a b");
}

TEST_F(RestGatewayTest, SubmitJobJsonBody) {
  Response res = client_->Post("/v1/jobs", R"({"spec_text": "name: x", "dry_run": true})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  const v1::SubmitJobRequest req = service_.Last<v1::SubmitJobRequest>();
  EXPECT_EQ(req.spec_text(), "name: x");
  EXPECT_TRUE(req.dry_run());
  v1::SubmitJobResponse parsed;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &parsed).ok()) << res.body();
  EXPECT_EQ(parsed.job().id(), "j-1");
  EXPECT_TRUE(Observed("SubmitJob", 200));
}

TEST_F(RestGatewayTest, SubmitJobYamlBodyGoesToSpecText) {
  const std::string yaml = "name: demo\nmodel:\n  preset: tiny\n";
  Response res = client_->Send(http::verb::post, "/v1/jobs?dry_run=true", yaml, "application/yaml");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  v1::SubmitJobRequest req = service_.Last<v1::SubmitJobRequest>();
  EXPECT_EQ(req.spec_text(), yaml);
  EXPECT_TRUE(req.dry_run());
  EXPECT_FALSE(req.has_spec());

  // A YAML Content-Type makes it a spec, even when it looks like JSON (YAML's flow style).
  res =
      client_->Send(http::verb::post, "/v1/jobs", "{\"name\": \"x\"}", "text/yaml; charset=utf-8");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::SubmitJobRequest>().spec_text(), "{\"name\": \"x\"}");
}

TEST_F(RestGatewayTest, ContentTypeChoosesTheFormatOrIs415) {
  const int before = service_.calls();
  // Neither JSON nor YAML: 415, naming what is accepted; the service is not called.
  Response res = client_->Send(http::verb::post, "/v1/jobs", "name: demo\n", "text/plain");
  EXPECT_EQ(res.result_int(), 415) << res.body();
  EXPECT_EQ(ContentType(res), "application/json");
  EXPECT_EQ(res.body(),
            R"x({"code": 3, "status": "INVALID_ARGUMENT", "message": "Content-Type text/plain )x"
            R"x(is not accepted here; send JSON (Content-Type: application/json) or a YAML job )x"
            R"x(spec (Content-Type: application/yaml)"})x"
            "\n");
  res = client_->Send(http::verb::post, "/v1/jobs/j-1:cancel", R"({"reason": "x"})",
                      "application/x-www-form-urlencoded");  // curl -d without -H
  EXPECT_EQ(res.result_int(), 415) << res.body();
  res = client_->Send(http::verb::post, "/v1/kv:get", "key: k\n", "application/yaml");
  EXPECT_EQ(res.result_int(), 415) << res.body();
  EXPECT_NE(res.body().find("YAML is taken only for job specs"), std::string::npos);
  EXPECT_EQ(service_.calls(), before);
  EXPECT_TRUE(Observed("SubmitJob", 415));
  EXPECT_TRUE(Observed("CancelJob", 415));

  // No body: nothing to read, whatever the type.
  res = client_->Send(http::verb::post, "/v1/jobs/j-2:resume", "", "text/plain");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  // A JSON body without a Content-Type is JSON.
  http::request<http::string_body> raw{http::verb::post, "/v1/jobs/j-3:cancel", 11};
  raw.set(http::field::host, "127.0.0.1");
  raw.body() = R"({"reason": "no type"})";
  raw.prepare_payload();
  http::write(client_->socket(), raw);
  res = Response();
  http::read(client_->socket(), client_->buffer(), res);
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::CancelJobRequest>().reason(), "no type");
  // application/json takes only JSON: a YAML spec under it is a JSON error.
  res = client_->Post("/v1/jobs", "name: demo\n");
  EXPECT_EQ(res.result_int(), 400) << res.body();
  EXPECT_NE(res.body().find("request body (JSON): malformed JSON at line 1, column 2: syntax "),
            std::string::npos)
      << res.body();
}

TEST_F(RestGatewayTest, PathAndQueryTextMustBeUtf8) {
  const int before = service_.calls();
  Response res = client_->Get("/v1/jobs/a%FFb");
  EXPECT_EQ(res.result_int(), 400) << res.body();
  EXPECT_NE(res.body().find("path: the id: not valid UTF-8: byte 0xFF at line 1, column 2"),
            std::string::npos)
      << res.body();
  res = client_->Get("/v1/jobs?label=team=%C3");
  EXPECT_EQ(res.result_int(), 400) << res.body();
  EXPECT_NE(res.body().find("query parameter label: not valid UTF-8: byte 0xC3"),
            std::string::npos)
      << res.body();
  res = client_->Get("/v1/jobs?%FF=1");
  EXPECT_EQ(res.result_int(), 400) << res.body();
  EXPECT_NE(res.body().find("query parameter name: not valid UTF-8"), std::string::npos);
  EXPECT_EQ(service_.calls(), before);
  EXPECT_EQ(client_->Get("/metrics?%FF").result_int(), 200);  // /metrics ignores its query
}

TEST_F(RestGatewayTest, ErrorBodiesStayValidUtf8) {
  service_.error = absl::NotFoundError("job a\xff" "b not found");
  Response res = client_->Get("/v1/jobs/j-1");
  EXPECT_EQ(res.result_int(), 404);
  EXPECT_EQ(res.body(),
            R"({"code": 5, "status": "NOT_FOUND", "message": "job a\\xFFb not found"})" "\n");
}

TEST_F(RestGatewayTest, ListJobsQueryParameters) {
  Response res = client_->Get(
      "/v1/jobs?state=running&state=QUEUED,job_state_failed&label=team=vision"
      "&label=x%3Dy=a%20b&page_size=10&page_token=tok");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  const v1::ListJobsRequest req = service_.Last<v1::ListJobsRequest>();
  ASSERT_EQ(req.states_size(), 3);
  EXPECT_EQ(req.states(0), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(req.states(1), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(req.states(2), v1::JOB_STATE_FAILED);
  ASSERT_EQ(req.labels_size(), 2);
  EXPECT_EQ(req.labels().at("team"), "vision");
  EXPECT_EQ(req.labels().at("x"), "y=a b");
  EXPECT_EQ(req.page_size(), 10);
  EXPECT_EQ(req.page_token(), "tok");
  v1::ListJobsResponse parsed;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &parsed).ok()) << res.body();
  EXPECT_EQ(parsed.jobs_size(), 2);
  EXPECT_EQ(parsed.next_page_token(), "next");
}

TEST_F(RestGatewayTest, BadQueryParametersAre400NamingTheParameter) {
  const int before = service_.calls();
  Response res = client_->Get("/v1/jobs?page_size=abc");
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_NE(res.body().find("page_size"), std::string::npos) << res.body();
  res = client_->Get("/v1/jobs?state=bogus");
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_NE(res.body().find("state"), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("bogus"), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("running"), std::string::npos) << res.body();  // the choices
  res = client_->Get("/v1/jobs?label=novalue");
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_NE(res.body().find("label"), std::string::npos) << res.body();
  res = client_->Get("/v1/jobs?colour=red");
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_NE(res.body().find("colour"), std::string::npos) << res.body();
  res = client_->Get("/v1/events?after=x");
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_NE(res.body().find("after"), std::string::npos) << res.body();
  EXPECT_EQ(service_.calls(), before);  // none reached the service
}

TEST_F(RestGatewayTest, OpenApiDocumentIsTheRouteTable) {
  gateway_->Stop();
  RestGatewayOptions options;
  options.auth = TokenAuth("s3cret");
  StartGateway(options);
  Response res = client_->Get("/openapi.json");  // no token needed
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(res[http::field::content_type], "application/json");
  EXPECT_TRUE(Observed("OpenApi", 200));
  const nlohmann::json doc = nlohmann::json::parse(res.body());
  EXPECT_EQ(doc["openapi"], "3.0.3");
  EXPECT_EQ(doc["paths"].size(), 30u);  // 31 routes: GET and POST /v1/jobs share a path
  std::set<std::string> ids;
  for (const auto& [path, item] : doc["paths"].items()) {
    for (const auto& [method, op] : item.items()) ids.insert(op["operationId"]);
  }
  EXPECT_EQ(ids.size(), 31u);
  EXPECT_TRUE(ids.count("WatchJob") && ids.count("WatchEvents") && ids.count("KvDelete") &&
              ids.count("CheckpointJob") && ids.count("DrainNode") && ids.count("UncordonNode") &&
              ids.count("HeartbeatBatch"));
  EXPECT_TRUE(ids.count("ExportCheckpoint") && ids.count("GetExport") &&
              ids.count("ListExports"));
  // GetExport's {id} is the export's id, which ExportCheckpoint's answer links to.
  EXPECT_EQ(doc["paths"]["/v1/exports/{id}"]["get"]["parameters"][0]["description"],
            "Fills the request's id.");
  EXPECT_TRUE(doc["paths"]["/v1/jobs/{id}:export"]["post"]["responses"]["200"]["links"].contains(
      "GetExport"))
      << doc["paths"]["/v1/jobs/{id}:export"].dump();
  // The query parameters are the ones the router accepts.
  std::vector<std::string> names;
  for (const auto& p : doc["paths"]["/v1/jobs/{id}/logs"]["get"]["parameters"]) {
    names.push_back(p["name"]);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"id", "attempt", "rank", "offset", "max_bytes", "pretty"}));
  const auto& cancel = doc["paths"]["/v1/jobs/{id}:cancel"]["post"];
  EXPECT_EQ(cancel["requestBody"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/dhp.v1.CancelJobRequest");
  EXPECT_TRUE(cancel["responses"].contains("401"));
  EXPECT_EQ(doc["paths"]["/metrics"]["get"]["security"], nlohmann::json::array());
  EXPECT_EQ(doc["security"][0].count("bearerAuth"), 1u);
  // Without auth the document declares none.
  gateway_->Stop();
  StartGateway({});
  const nlohmann::json open = nlohmann::json::parse(client_->Get("/openapi.json").body());
  EXPECT_FALSE(open.contains("security"));
  EXPECT_FALSE(open["paths"]["/v1/jobs/{id}:cancel"]["post"]["responses"].contains("401"));
}

TEST_F(RestGatewayTest, TheObserverTellsWhatTheGatewayAnsweredItself) {
  EXPECT_EQ(client_->Get("/v1/jobs/j-1").result_int(), 200);
  EXPECT_EQ(client_->Get("/v1/jobs?colour=red").result_int(), 400);
  EXPECT_EQ(client_->Get("/v1/nope").result_int(), 404);
  EXPECT_EQ(client_->Send(http::verb::delete_, "/v1/jobs").result_int(), 405);
  ASSERT_TRUE(Observed("Unknown", 405));
  std::lock_guard<std::mutex> lock(observed_mu_);
  EXPECT_EQ(unserved_, (std::vector<std::pair<std::string, int>>{
                           {"ListJobs", 400}, {"Unknown", 404}, {"Unknown", 405}}));
}

TEST_F(RestGatewayTest, PrettyJson) {
  Response res = client_->Get("/v1/jobs/j-1?pretty=true");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_GT(std::count(res.body().begin(), res.body().end(), '\n'), 2) << res.body();
  // A boolean needs a value: schemathesis found `?pretty=` accepted as true.
  for (const char* target : {"/v1/jobs/j-1?pretty", "/v1/jobs/j-1/logs?pretty="}) {
    res = client_->Get(target);
    EXPECT_EQ(res.result_int(), 400) << target;
    EXPECT_NE(res.body().find("query parameter pretty: expected true or false, got \\\"\\\""),
              std::string::npos)
        << res.body();
  }
}

// Issue 15 §2: a resume's body carries the new layout, by proto or JSON field names; a value
// that is no int32 is a 400 naming the field, before the service is called.
TEST_F(RestGatewayTest, AResumeBodyCarriesTheNewLayout) {
  Response res = client_->Post("/v1/jobs/j-9:resume",
                               R"({"vision_degree": 4, "textDegree": 2, "data_parallel_size": 0,)"
                               R"( "placement": "PLACEMENT_SEPARATE"})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  const v1::ResumeJobRequest req = service_.Last<v1::ResumeJobRequest>();
  EXPECT_EQ(req.job_id(), "j-9");
  EXPECT_EQ(req.vision_degree(), 4);
  EXPECT_EQ(req.text_degree(), 2);
  ASSERT_TRUE(req.has_data_parallel_size());  // set, even to 0: the controller refuses it
  EXPECT_EQ(req.data_parallel_size(), 0);
  EXPECT_EQ(req.placement(), v1::PLACEMENT_SEPARATE);

  res = client_->Post("/v1/jobs/j-10:resume", R"({"text_degree": 2147483648})");
  EXPECT_EQ(res.result_int(), 400) << res.body();
  EXPECT_NE(res.body().find("text_degree"), std::string::npos) << res.body();
  EXPECT_EQ(service_.Last<v1::ResumeJobRequest>().job_id(), "j-9");  // not called
}

// The path's id fills the request; a body that names another job is refused, not overridden.
TEST_F(RestGatewayTest, CancelResumeAndPathIdsFillTheRequest) {
  Response res =
      client_->Post("/v1/jobs/j-7:cancel", R"({"job_id": "j-7", "reason": "user asked"})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  v1::CancelJobRequest cancel = service_.Last<v1::CancelJobRequest>();
  EXPECT_EQ(cancel.job_id(), "j-7");
  EXPECT_EQ(cancel.reason(), "user asked");
  EXPECT_NE(res.body().find("JOB_STATE_CANCELLING"), std::string::npos) << res.body();

  res = client_->Post("/v1/jobs/j-6:cancel", R"({"job_id": "other", "reason": "x"})");
  EXPECT_EQ(res.result_int(), 400) << res.body();
  EXPECT_NE(res.body().find(R"(job_id: the body says \"other\" and the path \"j-6\"; leave it )"
                            "out of the body or make them agree"),
            std::string::npos)
      << res.body();
  EXPECT_EQ(service_.Last<v1::CancelJobRequest>().job_id(), "j-7");  // not called

  res = client_->Post("/v1/jobs/j-8:cancel");  // no body
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::CancelJobRequest>().job_id(), "j-8");

  res = client_->Post("/v1/jobs/j-9:resume");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  v1::ResumeJobRequest resume = service_.Last<v1::ResumeJobRequest>();
  EXPECT_EQ(resume.job_id(), "j-9");
  EXPECT_FALSE(resume.has_vision_degree() || resume.has_text_degree() ||
               resume.has_data_parallel_size());  // no body: the job's layout is kept
  EXPECT_EQ(resume.placement(), v1::PLACEMENT_UNSPECIFIED);
  EXPECT_TRUE(Observed("CancelJob", 200));
  EXPECT_TRUE(Observed("ResumeJob", 200));

  res = client_->Post("/v1/jobs/j-10:checkpoint", R"({"job_id": "j-10"})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::CheckpointJobRequest>().job_id(), "j-10");
  EXPECT_NE(res.body().find("\"at_step\":\"12\""), std::string::npos) << res.body();
  EXPECT_TRUE(Observed("CheckpointJob", 200));

  // Node routes take the node id from the path, whatever the body says.
  res = client_->Post("/v1/nodes/n-3:drain", R"({"node_id": "n-3", "reason": "kernel 6.1"})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::DrainNodeRequest>().node_id(), "n-3");
  EXPECT_EQ(service_.Last<v1::DrainNodeRequest>().reason(), "kernel 6.1");
  EXPECT_NE(res.body().find("\"cordoned\":true"), std::string::npos) << res.body();
  res = client_->Post("/v1/nodes/n-3:uncordon");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::UncordonNodeRequest>().node_id(), "n-3");
  EXPECT_TRUE(Observed("DrainNode", 200));
  EXPECT_TRUE(Observed("UncordonNode", 200));
}

TEST_F(RestGatewayTest, ExportRoutes) {
  // The job id comes from the path, the rest from the optional body.
  Response res = client_->Post("/v1/jobs/j-11:export",
                               R"({"job_id": "j-11", "checkpoint_id": "7", "dtype": "fp32"})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  v1::ExportCheckpointRequest req = service_.Last<v1::ExportCheckpointRequest>();
  EXPECT_EQ(req.job_id(), "j-11");
  EXPECT_EQ(req.checkpoint_id(), 7);
  EXPECT_EQ(req.dtype(), "fp32");
  EXPECT_NE(res.body().find("\"export\":{\"id\":\"x-1\""), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("EXPORT_STATE_RUNNING"), std::string::npos) << res.body();
  res = client_->Post("/v1/jobs/j-12:export");  // no body: the newest COMPLETE, bf16
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::ExportCheckpointRequest>().job_id(), "j-12");
  EXPECT_EQ(service_.Last<v1::ExportCheckpointRequest>().checkpoint_id(), 0);
  EXPECT_TRUE(Observed("ExportCheckpoint", 200));

  res = client_->Get("/v1/exports/x-5");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::GetExportRequest>().id(), "x-5");
  EXPECT_NE(res.body().find("EXPORT_STATE_SUCCEEDED"), std::string::npos) << res.body();
  EXPECT_TRUE(Observed("GetExport", 200));

  res = client_->Get("/v1/jobs/j-13/exports");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(service_.Last<v1::ListExportsRequest>().job_id(), "j-13");
  EXPECT_LT(res.body().find("x-2"), res.body().find("x-1")) << res.body();

  // Bad bodies are refused before the service: a number that is not an int64, an unknown
  // key, a wrong type.
  const int before = service_.calls();
  for (const char* body : {R"({"checkpoint_id": "99999999999999999999"})",
                           R"({"dtype": "bf16", "bogus": 1})", R"({"dtype": 5})"}) {
    res = client_->Post("/v1/jobs/j-1:export", body);
    EXPECT_EQ(res.result_int(), 400) << body << " -> " << res.body();
  }
  res = client_->Post("/v1/exports/x-5");  // GET only
  EXPECT_EQ(res.result_int(), 405) << res.body();
  EXPECT_EQ(service_.calls(), before);
}

TEST_F(RestGatewayTest, UnknownKeyInBodyIs400NamingTheKey) {
  Response res = client_->Post("/v1/jobs/j-7:cancel", R"({"reson": "typo"})");
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_EQ(ContentType(res), "application/json");
  EXPECT_NE(res.body().find("\"code\": 3"), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("\"status\": \"INVALID_ARGUMENT\""), std::string::npos) << res.body();
  EXPECT_NE(res.body().find("reson"), std::string::npos) << res.body();
  res = client_->Post("/v1/kv:add", R"({"delta": "not a number"})");
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_NE(res.body().find("delta"), std::string::npos) << res.body();
  res = client_->Post("/v1/kv:add", "{\"delta\": ");
  EXPECT_EQ(res.result_int(), 400) << res.body();
  EXPECT_TRUE(Observed("CancelJob", 400));
}

TEST_F(RestGatewayTest, WorkerFacingRoutes) {
  Response res = client_->Post("/v1/nodes:register", R"({"node": {"hostname": "h1"}})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  v1::RegisterNodeResponse registered;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &registered).ok()) << res.body();
  EXPECT_EQ(registered.node_id(), "n-h1");
  EXPECT_EQ(service_.Last<v1::RegisterNodeRequest>().node().hostname(), "h1");

  res = client_->Post("/v1/nodes/n-1:heartbeat");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  // Fields without presence print when empty.
  EXPECT_EQ(res.body(), "{\"ranks\":[],\"progress\":[]}\n");
  EXPECT_EQ(service_.Last<v1::HeartbeatRequest>().node_id(), "n-1");

  res = client_->Post("/v1/kv:add", R"({"scope": {"job_id": "j-1", "attempt": 2}, "key": "k",
                                        "delta": 5})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  v1::KvAddResponse added;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &added).ok()) << res.body();
  EXPECT_EQ(added.value(), 105);
  EXPECT_EQ(service_.Last<v1::KvAddRequest>().scope().attempt(), 2);

  for (const char* verb : {"set", "get", "delete"}) {
    res = client_->Post(std::string("/v1/kv:") + verb, R"({"key": "k"})");
    EXPECT_EQ(res.result_int(), 200) << verb << ": " << res.body();
  }
  for (const char* verb : {"wait", "check"}) {
    res = client_->Post(std::string("/v1/kv:") + verb, R"({"keys": ["a", "b"]})");
    EXPECT_EQ(res.result_int(), 200) << verb << ": " << res.body();
  }
  EXPECT_EQ(service_.Last<v1::KvDeleteRequest>().key(), "k");
  EXPECT_EQ(service_.Last<v1::KvWaitRequest>().keys_size(), 2);
  v1::KvCheckResponse checked;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &checked).ok()) << res.body();
  EXPECT_TRUE(checked.ready());

  res = client_->Post("/v1/jobs/j-3/progress", R"({"rank": 1, "step": 10, "loss": 1.5,
                                                   "metrics": {"tokens_per_s": 100}})");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  const v1::ReportProgressRequest progress = service_.Last<v1::ReportProgressRequest>();
  EXPECT_EQ(progress.job_id(), "j-3");
  EXPECT_EQ(progress.step(), 10);
  EXPECT_EQ(progress.metrics().at("tokens_per_s"), 100);
  v1::ReportProgressResponse progressed;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &progressed).ok()) << res.body();
  EXPECT_TRUE(progressed.stop());

  res = client_->Get("/v1/nodes");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_NE(res.body().find("n-1"), std::string::npos) << res.body();
  res = client_->Get("/v1/nodes?page_size=2&page_token=n6e2d31");
  EXPECT_EQ(res.result_int(), 200) << res.body();
  const v1::ListNodesRequest page = service_.Last<v1::ListNodesRequest>();
  EXPECT_EQ(page.page_size(), 2);
  EXPECT_EQ(page.page_token(), "n6e2d31");
  res = client_->Get("/v1/nodes?page_size=lots");
  EXPECT_EQ(res.result_int(), 400) << res.body();
  EXPECT_NE(res.body().find("page_size"), std::string::npos) << res.body();
  EXPECT_TRUE(Observed("KvAdd", 200));
  EXPECT_TRUE(Observed("Heartbeat", 200));
  EXPECT_TRUE(Observed("ListNodes", 200));
}

TEST_F(RestGatewayTest, GetLogsQueryParameters) {
  Response res = client_->Get(
      "/v1/jobs/j-4/logs?attempt=2&rank=0&offset=10&rank=3&offset=20&max_bytes=4096");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  v1::GetLogsRequest req = service_.Last<v1::GetLogsRequest>();
  EXPECT_EQ(req.job_id(), "j-4");
  EXPECT_EQ(req.attempt(), 2);
  ASSERT_EQ(req.ranks_size(), 2);
  EXPECT_EQ(req.ranks(0), 0);
  EXPECT_EQ(req.ranks(1), 3);
  ASSERT_EQ(req.offsets_size(), 2);
  EXPECT_EQ(req.offsets(0), 10);
  EXPECT_EQ(req.offsets(1), 20);
  EXPECT_EQ(req.max_bytes(), 4096);
  v1::GetLogsResponse parsed;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &parsed).ok()) << res.body();
  EXPECT_EQ(parsed.attempt(), 2);
  EXPECT_TRUE(parsed.final());
  ASSERT_EQ(parsed.chunks_size(), 2);
  EXPECT_EQ(parsed.chunks(1).world_rank(), 3);
  EXPECT_EQ(parsed.chunks(1).offset(), 20);
  EXPECT_EQ(parsed.chunks(1).data(), "rank 3\n");
  // bytes are base64 in proto JSON: "rank 0\n"
  EXPECT_NE(res.body().find("\"cmFuayAwCg==\""), std::string::npos) << res.body();
  EXPECT_TRUE(Observed("GetLogs", 200));

  // Defaults: the current attempt, every rank.
  res = client_->Get("/v1/jobs/j-5/logs");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  req = service_.Last<v1::GetLogsRequest>();
  EXPECT_EQ(req.job_id(), "j-5");
  EXPECT_EQ(req.attempt(), 0);
  EXPECT_EQ(req.ranks_size(), 0);
  EXPECT_EQ(req.offsets_size(), 0);
  EXPECT_EQ(req.max_bytes(), 0);

  // Comma-separated lists; fewer offsets than ranks is fine (the rest read from 0).
  res = client_->Get("/v1/jobs/j-6/logs?rank=1,2,5&offset=7");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  req = service_.Last<v1::GetLogsRequest>();
  EXPECT_EQ(std::vector<int32_t>(req.ranks().begin(), req.ranks().end()),
            (std::vector<int32_t>{1, 2, 5}));
  EXPECT_EQ(std::vector<int64_t>(req.offsets().begin(), req.offsets().end()),
            (std::vector<int64_t>{7}));
}

TEST_F(RestGatewayTest, GetLogsBadNumbersAre400NamingTheParameter) {
  const int before = service_.calls();
  // Numbers that do not parse; values out of range (attempt=-1, rank=-2, more offsets than
  // ranks) are the service's to refuse, for both transports (controller_test).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"attempt=x", "attempt"},     {"rank=abc", "rank"},
      {"rank=1,,2", "rank"},        {"rank=0&offset=1.5", "offset"},
      {"max_bytes=lots", "max_bytes"},
      {"max_bytes=99999999999", "max_bytes"}, {"after=3", "after"},
  };
  for (const auto& [query, name] : cases) {
    Response res = client_->Get("/v1/jobs/j-1/logs?" + query);
    EXPECT_EQ(res.result_int(), 400) << query << ": " << res.body();
    EXPECT_NE(res.body().find(name), std::string::npos) << query << ": " << res.body();
  }
  EXPECT_EQ(service_.calls(), before);  // none reached the service
  EXPECT_TRUE(Observed("GetLogs", 400));
}

TEST_F(RestGatewayTest, LogAndCheckpointWorkerRoutes) {
  Response res = client_->Post("/v1/nodes/n-7/logs", R"({"node_id": "n-7", "chunks": [
      {"job_id": "j-1", "attempt": 1, "world_rank": 2, "offset": 100, "data": "aGkK"}]})");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  const v1::AppendLogsRequest append = service_.Last<v1::AppendLogsRequest>();
  EXPECT_EQ(append.node_id(), "n-7");
  ASSERT_EQ(append.chunks_size(), 1);
  EXPECT_EQ(append.chunks(0).world_rank(), 2);
  EXPECT_EQ(append.chunks(0).offset(), 100);
  EXPECT_EQ(append.chunks(0).data(), "hi\n");
  v1::AppendLogsResponse appended;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &appended).ok()) << res.body();
  ASSERT_EQ(appended.sizes_size(), 1);
  EXPECT_EQ(appended.sizes(0), 103);
  EXPECT_TRUE(Observed("AppendLogs", 200));

  res = client_->Post("/v1/jobs/j-2/checkpoints", R"({"attempt": 1, "step": 40, "world_size": 2,
      "path": "/ckpt/j-2/step-40", "write_seconds": 1.5,
      "shard": {"rank": 1, "file": "rank-1.safetensors", "size_bytes": 1024, "crc32c": "0a0b"}})");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  const v1::ReportCheckpointRequest report = service_.Last<v1::ReportCheckpointRequest>();
  EXPECT_EQ(report.job_id(), "j-2");
  EXPECT_EQ(report.step(), 40);
  EXPECT_EQ(report.shard().rank(), 1);
  EXPECT_EQ(report.shard().crc32c(), "0a0b");
  EXPECT_DOUBLE_EQ(report.write_seconds(), 1.5);
  v1::ReportCheckpointResponse reported;
  ASSERT_TRUE(ParseProtoYaml(res.body(), &reported).ok()) << res.body();
  EXPECT_EQ(reported.checkpoint().state(), v1::CHECKPOINT_STATE_PARTIAL);
  EXPECT_TRUE(Observed("ReportCheckpoint", 200));

  res = client_->Post("/v1/jobs/j-3/checkpoints:reject",
                      R"({"attempt": 2, "checkpoint_id": 9, "rank": 0,
                          "reason": "rank-0.safetensors: crc32c mismatch"})");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(res.body(), "{}\n");
  const v1::RejectCheckpointRequest reject = service_.Last<v1::RejectCheckpointRequest>();
  EXPECT_EQ(reject.job_id(), "j-3");
  EXPECT_EQ(reject.checkpoint_id(), 9);
  EXPECT_EQ(reject.reason(), "rank-0.safetensors: crc32c mismatch");
  EXPECT_TRUE(Observed("RejectCheckpoint", 200));

  // Unknown keys are refused as elsewhere; wrong methods are 405.
  res = client_->Post("/v1/jobs/j-3/checkpoints", R"({"stpe": 1})");
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_NE(res.body().find("stpe"), std::string::npos) << res.body();
  res = client_->Get("/v1/nodes/n-7/logs");
  EXPECT_EQ(res.result_int(), 405);
  EXPECT_EQ(std::string(res[http::field::allow]), "POST");
  res = client_->Post("/v1/jobs/j-1/logs");
  EXPECT_EQ(res.result_int(), 405);
  EXPECT_EQ(std::string(res[http::field::allow]), "GET");
}

TEST_F(RestGatewayTest, ServiceErrorsMapToHttpStatus) {
  const std::vector<std::pair<absl::Status, int>> cases = {
      {absl::InvalidArgumentError("bad \"x\"\n"), 400},
      {absl::NotFoundError("job j-1 not found"), 404},
      {absl::AlreadyExistsError("dup"), 409},
      {absl::FailedPreconditionError("job is final"), 409},
      {absl::DeadlineExceededError("slow"), 504},
      {absl::UnauthenticatedError("who"), 401},
      {absl::PermissionDeniedError("no"), 403},
      {absl::UnavailableError("later"), 503},
      {absl::UnimplementedError("nope"), 501},
      {absl::ResourceExhaustedError("full"), 429},
      {absl::InternalError("boom"), 500},
      {absl::DataLossError("gone"), 500},
  };
  for (const auto& [status, http_status] : cases) {
    service_.error = status;
    Response res = client_->Get("/v1/jobs/j-1");
    EXPECT_EQ(res.result_int(), http_status) << status;
    EXPECT_EQ(ContentType(res), "application/json");
    EXPECT_EQ(res.body(), StatusToJson(status) + "\n");
  }
  EXPECT_EQ(StatusToJson(absl::InvalidArgumentError("bad \"x\"\n")),
            R"({"code": 3, "status": "INVALID_ARGUMENT", "message": "bad \"x\"\n"})");
  EXPECT_EQ(StatusToJson(absl::NotFoundError("job j-1 not found")),
            R"({"code": 5, "status": "NOT_FOUND", "message": "job j-1 not found"})");
  EXPECT_TRUE(Observed("GetJob", 404));
}

TEST_F(RestGatewayTest, UnknownPathIs404AndWrongMethodIs405) {
  Response res = client_->Get("/v1/nope");
  EXPECT_EQ(res.result_int(), 404);
  EXPECT_NE(res.body().find("\"status\": \"NOT_FOUND\""), std::string::npos) << res.body();
  EXPECT_EQ(client_->Get("/v1/jobs/j-1/nope").result_int(), 404);
  EXPECT_EQ(client_->Post("/v1/jobs/j-1:explode").result_int(), 404);

  res = client_->Send(http::verb::delete_, "/v1/jobs/j-1");
  EXPECT_EQ(res.result_int(), 405);
  EXPECT_EQ(std::string(res[http::field::allow]), "GET");
  res = client_->Get("/v1/jobs/j-1:cancel");
  EXPECT_EQ(res.result_int(), 405);
  EXPECT_EQ(std::string(res[http::field::allow]), "POST");
  res = client_->Send(http::verb::put, "/v1/jobs");
  EXPECT_EQ(res.result_int(), 405);
  EXPECT_EQ(std::string(res[http::field::allow]), "POST, GET");
  EXPECT_EQ(service_.calls(), 0);
  EXPECT_TRUE(Observed("Unknown", 404));
  EXPECT_TRUE(Observed("Unknown", 405));
}

TEST_F(RestGatewayTest, HealthzAndMetrics) {
  Response res = client_->Get("/healthz");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "ok\n");
  service_.health = absl::UnavailableError("store is read-only");
  res = client_->Get("/healthz");
  EXPECT_EQ(res.result_int(), 503);
  EXPECT_EQ(res.body(), "store is read-only\n");

  res = client_->Get("/metrics");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(ContentType(res), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res.body(), "# TYPE dhp_up gauge\ndhp_up 1\n");
  EXPECT_TRUE(Observed("Healthz", 200));
  EXPECT_TRUE(Observed("Healthz", 503));
  EXPECT_TRUE(Observed("Metrics", 200));
}

}  // namespace
}  // namespace dhp::api
