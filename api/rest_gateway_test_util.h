// Test support for the REST gateway: a fake DhpService that records requests and answers
// with canned responses, and a synchronous Beast HTTP/1.1 client over one keep-alive
// connection. Test-only (header-only).
//
// Thread-safety: FakeService is thread-safe once its public knobs are set (set them before
// requests are made); a TestHttpClient is used by one thread.
#ifndef DHP_API_REST_GATEWAY_TEST_UTIL_H_
#define DHP_API_REST_GATEWAY_TEST_UTIL_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/rest_gateway.h"
#include "api/service.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"

namespace dhp::api::testing {

using Response = boost::beast::http::response<boost::beast::http::string_body>;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// Records the last request of each call and answers with canned responses, or `error`.
class FakeService : public DhpService {
 public:
  // Set before requests are made.
  absl::Status error;
  absl::Status health;
  int watch_events = 3;            // events WatchJob writes (ids after+1 ...)
  absl::Status watch_status;       // what WatchJob returns after writing
  absl::Status watch_error_after;  // returned after the events instead of waiting (if !ok)

  template <typename T>
  T Last() {
    std::lock_guard<std::mutex> lock(mu_);
    T out;
    auto it = last_.find(T::descriptor()->full_name());
    if (it != last_.end()) out.CopyFrom(*it->second);
    return out;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // Waits until a WatchJob call has returned; true if it saw the client go away.
  bool WaitWatchReturned(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return watch_returned_ > 0; });
    return watch_returned_ > 0 && watch_saw_cancel_;
  }

  absl::Status SubmitJob(const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp) override {
    resp->mutable_job()->set_id("j-1");
    resp->mutable_job()->set_state(v1::JOB_STATE_QUEUED);
    return Record(req);
  }
  absl::Status GetJob(const v1::GetJobRequest& req, v1::GetJobResponse* resp) override {
    resp->mutable_job()->set_id(req.job_id());
    resp->mutable_job()->set_state(v1::JOB_STATE_RUNNING);
    resp->add_runs()->set_attempt(1);
    return Record(req);
  }
  absl::Status ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) override {
    resp->add_jobs()->set_id("j-2");
    resp->add_jobs()->set_id("j-1");
    resp->set_next_page_token("next");
    return Record(req);
  }
  absl::Status CancelJob(const v1::CancelJobRequest& req, v1::CancelJobResponse* resp) override {
    resp->mutable_job()->set_id(req.job_id());
    resp->mutable_job()->set_state(v1::JOB_STATE_CANCELLING);
    return Record(req);
  }
  absl::Status ResumeJob(const v1::ResumeJobRequest& req, v1::ResumeJobResponse* resp) override {
    resp->mutable_run()->set_attempt(2);
    return Record(req);
  }
  absl::Status CheckpointJob(const v1::CheckpointJobRequest& req,
                             v1::CheckpointJobResponse* resp) override {
    resp->set_at_step(12);
    return Record(req);
  }
  absl::Status ExportCheckpoint(const v1::ExportCheckpointRequest& req,
                                v1::ExportCheckpointResponse* resp) override {
    resp->mutable_export_()->set_id("x-1");
    resp->mutable_export_()->set_job_id(req.job_id());
    resp->mutable_export_()->set_state(v1::EXPORT_STATE_RUNNING);
    return Record(req);
  }
  absl::Status GetExport(const v1::GetExportRequest& req, v1::GetExportResponse* resp) override {
    resp->mutable_export_()->set_id(req.id());
    resp->mutable_export_()->set_state(v1::EXPORT_STATE_SUCCEEDED);
    return Record(req);
  }
  absl::Status ListExports(const v1::ListExportsRequest& req,
                           v1::ListExportsResponse* resp) override {
    resp->add_exports()->set_id("x-2");
    resp->add_exports()->set_id("x-1");
    return Record(req);
  }
  absl::Status WatchJob(const v1::WatchJobRequest& req, EventSink& sink) override {
    Record(req).IgnoreError();
    if (!error.ok()) return error;
    bool cancelled = false;
    for (int i = 1; i <= watch_events && !cancelled; ++i) {
      v1::Event event;
      event.set_id(req.after_event_id() + i);
      event.set_job_id(req.job_id());
      event.set_type("job.state");
      event.set_to_state("RUNNING");
      cancelled = !sink.Write(event);
    }
    absl::Status result = watch_status;
    if (!watch_error_after.ok()) {
      result = watch_error_after;
    } else if (req.follow()) {
      // Wait for more events until the client leaves (give up after 20 s).
      for (int i = 0; i < 4000 && !cancelled; ++i) {
        cancelled = sink.IsCancelled();
        if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    watch_saw_cancel_ = cancelled || sink.IsCancelled();
    ++watch_returned_;
    cv_.notify_all();
    return result;
  }
  absl::Status ListNodes(const v1::ListNodesRequest& req, v1::ListNodesResponse* resp) override {
    resp->add_nodes()->set_id("n-1");
    return Record(req);
  }
  absl::Status DrainNode(const v1::DrainNodeRequest& req, v1::DrainNodeResponse* resp) override {
    resp->mutable_node()->set_id(req.node_id());
    resp->mutable_node()->set_cordoned(true);
    return Record(req);
  }
  absl::Status UncordonNode(const v1::UncordonNodeRequest& req,
                            v1::UncordonNodeResponse* resp) override {
    resp->mutable_node()->set_id(req.node_id());
    return Record(req);
  }
  absl::Status RegisterNode(const v1::RegisterNodeRequest& req,
                            v1::RegisterNodeResponse* resp) override {
    resp->set_node_id("n-" + req.node().hostname());
    resp->set_heartbeat_interval_ms(1000);
    return Record(req);
  }
  absl::Status Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse*) override {
    return Record(req);
  }
  absl::Status HeartbeatBatch(const v1::HeartbeatBatchRequest& req,
                              v1::HeartbeatBatchResponse* resp) override {
    for (int i = 0; i < req.heartbeats_size(); ++i) resp->add_answers();
    return Record(req);
  }
  absl::Status KvSet(const v1::KvSetRequest& req, v1::KvSetResponse*) override {
    return Record(req);
  }
  absl::Status KvGet(const v1::KvGetRequest& req, v1::KvGetResponse*) override {
    return Record(req);
  }
  absl::Status KvAdd(const v1::KvAddRequest& req, v1::KvAddResponse* resp) override {
    resp->set_value(req.delta() + 100);
    return Record(req);
  }
  absl::Status KvWait(const v1::KvWaitRequest& req, v1::KvWaitResponse*) override {
    return Record(req);
  }
  absl::Status KvCheck(const v1::KvCheckRequest& req, v1::KvCheckResponse* resp) override {
    resp->set_ready(true);
    return Record(req);
  }
  absl::Status KvDelete(const v1::KvDeleteRequest& req, v1::KvDeleteResponse*) override {
    return Record(req);
  }
  absl::Status ReportProgress(const v1::ReportProgressRequest& req,
                              v1::ReportProgressResponse* resp) override {
    resp->set_stop(true);
    return Record(req);
  }
  // One chunk "rank R\n" per requested rank (rank 0 when none), at the requested offset.
  absl::Status GetLogs(const v1::GetLogsRequest& req, v1::GetLogsResponse* resp) override {
    resp->set_attempt(req.attempt() == 0 ? 1 : req.attempt());
    std::vector<int32_t> ranks(req.ranks().begin(), req.ranks().end());
    if (ranks.empty()) ranks.push_back(0);
    for (size_t i = 0; i < ranks.size(); ++i) {
      v1::LogChunk* chunk = resp->add_chunks();
      chunk->set_job_id(req.job_id());
      chunk->set_attempt(resp->attempt());
      chunk->set_world_rank(ranks[i]);
      chunk->set_offset(static_cast<int>(i) < req.offsets_size() ? req.offsets(i) : 0);
      chunk->set_data("rank " + std::to_string(ranks[i]) + "\n");
    }
    resp->set_final(true);
    return Record(req);
  }
  // Per chunk, its end (offset + size).
  absl::Status AppendLogs(const v1::AppendLogsRequest& req,
                          v1::AppendLogsResponse* resp) override {
    for (const v1::LogChunk& chunk : req.chunks()) {
      resp->add_sizes(chunk.offset() + static_cast<int64_t>(chunk.data().size()));
    }
    return Record(req);
  }
  absl::Status ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                v1::ReportCheckpointResponse* resp) override {
    resp->mutable_checkpoint()->set_job_id(req.job_id());
    resp->mutable_checkpoint()->set_step(req.step());
    resp->mutable_checkpoint()->set_state(v1::CHECKPOINT_STATE_PARTIAL);
    return Record(req);
  }
  absl::Status RejectCheckpoint(const v1::RejectCheckpointRequest& req,
                                v1::RejectCheckpointResponse*) override {
    return Record(req);
  }
  absl::Status Health() override { return health; }
  std::string MetricsText() override { return "# TYPE dhp_up gauge\ndhp_up 1\n"; }

 private:
  absl::Status Record(const google::protobuf::Message& req) {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    std::unique_ptr<google::protobuf::Message> copy(req.New());
    copy->CopyFrom(req);
    last_[req.GetDescriptor()->full_name()] = std::move(copy);
    return error;
  }

  std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<google::protobuf::Message>> last_;
  int calls_ = 0;
  int watch_returned_ = 0;
  bool watch_saw_cancel_ = false;
};

// A synchronous HTTP/1.1 client over one keep-alive connection.
class TestHttpClient {
 public:
  explicit TestHttpClient(uint16_t port) : socket_(io_) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }

  Response Send(http::verb method, const std::string& target, const std::string& body = "",
                const std::string& content_type = "application/json") {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty()) {
      req.set(http::field::content_type, content_type);
      req.body() = body;
    }
    req.prepare_payload();
    http::write(socket_, req);
    Response res;
    http::read(socket_, buffer_, res);
    return res;
  }
  Response Get(const std::string& target) { return Send(http::verb::get, target); }
  Response Post(const std::string& target, const std::string& body = "") {
    return Send(http::verb::post, target, body);
  }

  // Sends a GET and reads the streamed body until it holds `lines` lines (or ends).
  // Returns the headers and the body read so far; leaves the stream open.
  Response StartStream(const std::string& target, int lines) {
    http::request<http::string_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    http::write(socket_, req);
    parser_ = std::make_unique<http::response_parser<http::string_body>>();
    http::read_header(socket_, buffer_, *parser_);
    while (!parser_->is_done() &&
           std::count(parser_->get().body().begin(), parser_->get().body().end(), '\n') < lines) {
      http::read_some(socket_, buffer_, *parser_);
    }
    return parser_->get();
  }
  // Reads the rest of a stream started by StartStream.
  Response FinishStream() {
    http::read(socket_, buffer_, *parser_);
    return parser_->get();
  }

  void Close() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }
  tcp::socket& socket() { return socket_; }
  beast::flat_buffer& buffer() { return buffer_; }

 private:
  asio::io_context io_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  std::unique_ptr<http::response_parser<http::string_body>> parser_;
};

inline std::vector<std::string> Lines(const std::string& body) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = body.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.push_back(body.substr(start, nl - start));
  }
  return out;
}

inline std::string ContentType(const Response& res) {
  return std::string(res[http::field::content_type]);
}

// A real RestGateway on 127.0.0.1:0 over a FakeService, with a client connected to it and
// the observer's calls recorded (Observed waits for one).
class RestGatewayTest : public ::testing::Test {
 protected:
  void SetUp() override { StartGateway({}); }
  void TearDown() override { gateway_->Stop(); }

  void StartGateway(RestGatewayOptions options) {
    options.address = "127.0.0.1";
    options.port = 0;
    gateway_ = std::make_unique<RestGateway>(
        service_, options,
        [this](std::string_view route, int status, double seconds, bool reached_service) {
          std::lock_guard<std::mutex> lock(observed_mu_);
          observed_.emplace_back(std::string(route), status);
          if (!reached_service) unserved_.emplace_back(std::string(route), status);
          EXPECT_GE(seconds, 0);
        });
    ASSERT_TRUE(gateway_->Start().ok());
    ASSERT_NE(gateway_->port(), 0);
    client_ = std::make_unique<TestHttpClient>(gateway_->port());
  }

  // Waits for the observer to have seen (route, status): it runs after the response is sent.
  bool Observed(const std::string& route, int status) {
    for (int i = 0; i < 400; ++i) {
      {
        std::lock_guard<std::mutex> lock(observed_mu_);
        for (const auto& [r, s] : observed_) {
          if (r == route && s == status) return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // Declared before the gateway: its threads call the observer until it has stopped.
  FakeService service_;
  std::mutex observed_mu_;  // guards observed_
  std::vector<std::pair<std::string, int>> observed_;
  std::vector<std::pair<std::string, int>> unserved_;  // answered without the service
  std::unique_ptr<RestGateway> gateway_;
  std::unique_ptr<TestHttpClient> client_;
};

}  // namespace dhp::api::testing

#endif  // DHP_API_REST_GATEWAY_TEST_UTIL_H_
