// Tests the Controller as the API sees it (controller_test_fixture.h: a real loop thread over a
// Store in a temporary file): admission, the rendezvous KV's job-attempt scoping, a resume on a new layout (admitted against the cluster,
// placed as that layout), metrics, health, the heartbeat timer, shutdown, and state surviving a
// restart.
#include "controller/controller_test_fixture.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "common/metrics_exposition.h"
#include "controller/sqlite_db.h"
#include "controller/store.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using namespace std::chrono_literals;

// `text` without the dhp_controller_tick_seconds lines (they change with every tick).
std::string WithoutTickLines(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string l; std::getline(in, l);) {
    if (l.find("dhp_controller_tick_seconds") == std::string::npos) out += l + "\n";
  }
  return out;
}

class ControllerTest : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    StartController();
  }
};

TEST_F(ControllerTest, AJobThatCanNeverFitTheGpusIsRefusedWithItsMemoryBreakdown) {
  auto register_gpus = [&](const std::string& id, int64_t mib) {
    v1::RegisterNodeRequest req;
    req.mutable_node()->set_id(id);
    for (int i = 0; i < 8; ++i) {
      v1::Gpu* gpu = req.mutable_node()->mutable_resources()->add_gpus();
      gpu->set_index(i);
      gpu->set_memory_bytes(mib << 20);
    }
    v1::RegisterNodeResponse resp;
    return controller_->RegisterNode(req, &resp);
  };
  ASSERT_TRUE(register_gpus("l4", 23034).ok());  // 8 GPUs of 22.5 GiB
  std::ifstream in("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  std::stringstream text;
  text << in.rdbuf();
  v1::SubmitJobRequest req;
  req.set_spec_text(text.str());
  v1::SubmitJobResponse resp;
  absl::Status s = controller_->SubmitJob(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(s.message());
  EXPECT_EQ(message.rfind("the job can never fit this cluster: needs 66.6 GiB per rank; the "
                          "largest device has 22.5 GiB. The per-rank memory estimate of "
                          "qwen2_5_vl_7b (vision sequence x4, text tensor x4, dp 2, collocate, "
                          "GPU): 8 vision+text ranks: vision parameters 1.26 GiB, vision "
                          "gradients 1.26 GiB, ",
                          0),
            0u)
      << message;
  for (const char* part : {"text parameters 3.55 GiB", "text fp32 master 7.09 GiB",
                           "text Adam moments 14.19 GiB", "text activations 22.21 GiB",
                           "runtime overhead 4.13 GiB, total 66.64 GiB",
                           "`dhpctl plan -f SPEC --gpu MODEL` compares the layouts that fit"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << "\n" << message;
  }
  // Nothing was stored: no job, no job event.
  v1::ListJobsResponse list;
  ASSERT_TRUE(controller_->ListJobs(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
  for (const v1::Event& e : Replay("")) EXPECT_EQ(e.job_id(), "") << e.type();

  ASSERT_TRUE(register_gpus("h100", 81559).ok());  // 8 x 79.6 GiB
  s = controller_->SubmitJob(req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(resp.job().state(), v1::JOB_STATE_SCHEDULED);
  v1::GetJobRequest get;
  get.set_job_id(resp.job().id());
  v1::GetJobResponse job;
  ASSERT_TRUE(controller_->GetJob(get, &job).ok());
  ASSERT_EQ(job.runs_size(), 1);
  ASSERT_EQ(job.runs(0).placement_size(), 8);
  for (const v1::RankPlacement& p : job.runs(0).placement()) EXPECT_EQ(p.node_id(), "h100");
}

// gRPC's thread does SubmitJob's stateless part (PrepareSubmitJob: the YAML parsed and
// validated, the spec put in its place) so that the loop does not parse YAML. The loop must
// then make the same job of the prepared request as of the text: every example spec, dry run.
TEST_F(ControllerTest, APreparedSubmissionGivesTheSameJobAsItsText) {
  int specs = 0;
  for (const auto& entry : std::filesystem::directory_iterator("configs")) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".yaml" || path.find("controller") != std::string::npos) {
      continue;
    }
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    v1::SubmitJobRequest req;
    req.set_spec_text(text.str());
    req.set_dry_run(true);
    v1::SubmitJobResponse direct;
    ASSERT_TRUE(controller_->SubmitJob(req, &direct).ok()) << path;

    v1::SubmitJobRequest prepared = req;
    ASSERT_TRUE(controller_->PrepareSubmitJob(&prepared).ok()) << path;
    EXPECT_TRUE(prepared.spec_text().empty()) << path;
    EXPECT_EQ(prepared.spec().name(), direct.job().spec().name()) << path;
    v1::SubmitJobResponse via;
    ASSERT_TRUE(controller_->SubmitJob(prepared, &via).ok()) << path;
    EXPECT_EQ(via.job().spec().DebugString(), direct.job().spec().DebugString()) << path;
    ++specs;
  }
  EXPECT_EQ(specs, 3);  // tiny-cpu, qwen2_5_vl_7b-sp4-tp4, qwen2_5_vl_32b-sp8-tp8
}

// A spec PrepareSubmitJob refuses gets SubmitJob's own message, and the request is unchanged.
TEST_F(ControllerTest, PrepareRefusesWhatSubmitRefusesWithItsMessage) {
  v1::SubmitJobRequest bad;
  bad.set_spec_text("name: bad\nmodel: {preset: tiny}\nvision: {degree: 3}\n"
                    "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n");
  v1::SubmitJobResponse resp;
  const absl::Status submitted = controller_->SubmitJob(bad, &resp);
  ASSERT_EQ(submitted.code(), absl::StatusCode::kInvalidArgument) << submitted;
  v1::SubmitJobRequest copy = bad;
  EXPECT_EQ(controller_->PrepareSubmitJob(&copy), submitted);
  EXPECT_EQ(copy.SerializeAsString(), bad.SerializeAsString());

  v1::SubmitJobRequest both = bad;
  both.mutable_spec()->set_name("x");
  const absl::Status s = controller_->PrepareSubmitJob(&both);
  EXPECT_EQ(s, absl::InvalidArgumentError("set either spec or spec_text, not both"));

  v1::SubmitJobRequest message;  // a spec message alone is left for the loop to validate
  message.mutable_spec()->set_name("as-sent");
  const std::string sent = message.SerializeAsString();
  EXPECT_TRUE(controller_->PrepareSubmitJob(&message).ok());
  EXPECT_EQ(message.SerializeAsString(), sent);

  v1::ListJobsResponse list;
  ASSERT_TRUE(controller_->ListJobs(v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

// Issue 15 §2: a resume on a new layout passes the admission check a submit passes (refused,
// nothing changes), and the new attempt is placed as the new layout asks: 2 replicas, 2 ranks.
TEST_F(ControllerTest, ResumeOnANewLayoutIsAdmittedAndPlacedOnIt) {
  v1::SubmitJobRequest submit;
  submit.set_spec_text(
      "name: relayout\nmodel: {preset: tiny}\n"
      "training: {max_steps: 10, batch_size: 4, micro_batch_size: 1}\n"
      "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n");
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(controller_->SubmitJob(submit, &submitted).ok());  // no node yet: QUEUED
  const std::string id = submitted.job().id();
  ASSERT_TRUE(Cancel(id).ok());
  ASSERT_TRUE(Register("node-a").ok());  // 2 CPU slots
  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::GetJobResponse before;
  ASSERT_TRUE(controller_->GetJob(get, &before).ok());

  v1::ResumeJobRequest req;
  req.set_job_id(id);
  req.set_data_parallel_size(4);
  v1::ResumeJobResponse resp;
  absl::Status s = controller_->ResumeJob(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(std::string(s.message()).rfind(
                "resume: data_parallel_size 4: the job can never fit this cluster: ", 0),
            0u)
      << s;
  v1::GetJobResponse after;
  ASSERT_TRUE(controller_->GetJob(get, &after).ok());
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());

  req.set_data_parallel_size(2);
  s = controller_->ResumeJob(req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  after.Clear();
  ASSERT_TRUE(controller_->GetJob(get, &after).ok());
  EXPECT_EQ(after.job().spec().data_parallel_size(), 2);
  EXPECT_EQ(after.job().state(), v1::JOB_STATE_SCHEDULED);
  ASSERT_EQ(after.runs_size(), 2);
  EXPECT_EQ(after.runs(1).world_size(), 2);
  EXPECT_EQ(after.runs(1).placement_size(), 2);
}

TEST_F(ControllerTest, KvIsScopedToTheCurrentAttemptOfARealJob) {
  const v1::Job job = Submit();
  v1::KvSetRequest set;
  set.mutable_scope()->set_job_id(job.id());
  set.mutable_scope()->set_attempt(1);
  set.set_key("rank0/addr");
  set.set_value("10.0.0.1:29500");
  v1::KvSetResponse set_resp;
  ASSERT_TRUE(controller_->KvSet(set, &set_resp).ok());

  v1::KvGetRequest get;
  *get.mutable_scope() = set.scope();
  get.set_key("rank0/addr");
  v1::KvGetResponse got;
  ASSERT_TRUE(controller_->KvGet(get, &got).ok());
  EXPECT_EQ(got.value(), "10.0.0.1:29500");

  v1::KvAddRequest add;
  *add.mutable_scope() = set.scope();
  add.set_key("joined");
  add.set_delta(2);
  v1::KvAddResponse added;
  ASSERT_TRUE(controller_->KvAdd(add, &added).ok());
  ASSERT_TRUE(controller_->KvAdd(add, &added).ok());
  EXPECT_EQ(added.value(), 4);

  get.mutable_scope()->set_job_id("j-missing");
  absl::Status s = controller_->KvGet(get, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "job j-missing not found");

  // A new attempt: the old one is refused, the new one starts empty.
  EXPECT_EQ(controller_->KvKeyCount(job.id(), 1), 2u);
  ASSERT_TRUE(Cancel(job.id()).ok());
  EXPECT_EQ(controller_->KvKeyCount(job.id(), 1), 0u);  // dropped when the run ended
  v1::ResumeJobRequest resume;
  resume.set_job_id(job.id());
  v1::ResumeJobResponse resumed;
  ASSERT_TRUE(controller_->ResumeJob(resume, &resumed).ok());
  *get.mutable_scope() = set.scope();
  s = controller_->KvGet(get, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "attempt 1 of job " + job.id() + " is not current; the job is on attempt 2");
  get.mutable_scope()->set_attempt(2);
  s = controller_->KvGet(get, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "key \"rank0/addr\" is not set in job " + job.id() + " attempt 2");

  get.mutable_scope()->set_attempt(0);
  s = controller_->KvGet(get, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "scope.attempt: 0 must be at least 1");
  get.mutable_scope()->set_job_id("");
  s = controller_->KvGet(get, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "scope.job_id: must not be empty");
}

// Issue 15 §5: the rendezvous keys lived in memory only, so a controller restart while ranks
// bootstrapped lost them (a rank waiting for a peer's key never saw it) and the attempt failed.
// They are kept in the store now, for as long as the run lasts.
TEST_F(ControllerTest, KvKeysSurviveARestartUntilTheRunEnds) {
  const v1::Job job = Submit();  // queued: attempt 1, its run PENDING
  v1::KvSetRequest set;
  set.mutable_scope()->set_job_id(job.id());
  set.mutable_scope()->set_attempt(1);
  set.set_key("world/arrived/0");
  set.set_value("0");
  v1::KvSetResponse set_resp;
  ASSERT_TRUE(controller_->KvSet(set, &set_resp).ok());
  v1::KvAddRequest add;
  *add.mutable_scope() = set.scope();
  add.set_key("world/store/counter");
  add.set_delta(1);
  v1::KvAddResponse added;
  ASSERT_TRUE(controller_->KvAdd(add, &added).ok());

  StopController();
  StartController();
  EXPECT_EQ(controller_->KvKeyCount(job.id(), 1), 2u);
  v1::KvGetRequest get;
  *get.mutable_scope() = set.scope();
  get.set_key("world/arrived/0");
  v1::KvGetResponse got;
  ASSERT_TRUE(controller_->KvGet(get, &got).ok());
  EXPECT_EQ(got.value(), "0");
  ASSERT_TRUE(controller_->KvAdd(add, &added).ok());
  EXPECT_EQ(added.value(), 2);  // counted on from the stored value

  ASSERT_TRUE(Cancel(job.id()).ok());  // the run ends: its keys go, from the store too
  EXPECT_EQ(controller_->KvKeyCount(job.id(), 1), 0u);
  StopController();
  {
    absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path_);
    ASSERT_TRUE(db.ok()) << db.status();
    absl::StatusOr<int64_t> rows = (*db)->QueryInt("SELECT COUNT(*) FROM rendezvous_keys");
    ASSERT_TRUE(rows.ok()) << rows.status();
    EXPECT_EQ(*rows, 0);
  }
  StartController();
  EXPECT_EQ(controller_->KvKeyCount(job.id(), 1), 0u);
}

// A drain cordons the node for good (restarts, re-registration) and asks the runs on it to
// checkpoint and stop; the request is in memory, so a restarted controller asks again.
TEST_F(ControllerTest, ADrainedNodeStaysCordonedAndItsRunIsAskedAgainAfterARestart) {
  ASSERT_TRUE(Register("n1").ok());
  const v1::Job job = Submit();
  const v1::HeartbeatRequest beat = LaunchRankZero(job);
  v1::HeartbeatResponse launch;
  auto progress = [&](int64_t step) {
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_attempt(1);
    req.set_rank(0);
    req.set_step(step);
    req.set_total_steps(10);
    v1::ReportProgressResponse resp;
    absl::Status s = controller_->ReportProgress(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp;
  };
  EXPECT_FALSE(progress(1).preempt());

  v1::DrainNodeRequest drain;
  drain.set_node_id("n1");
  drain.set_reason("disk swap");
  v1::DrainNodeResponse drained;
  ASSERT_TRUE(controller_->DrainNode(drain, &drained).ok());
  EXPECT_TRUE(drained.node().cordoned());
  EXPECT_EQ(drained.node().cordon_reason(), "disk swap");
  ASSERT_EQ(drained.job_ids_size(), 1);
  EXPECT_EQ(drained.job_ids(0), job.id());
  EXPECT_EQ(progress(2).preempt_reason(), "node n1 was drained (disk swap)");

  StopController();
  StartController();
  ASSERT_TRUE(Register("n1").ok());  // the agent reconnects, re-registering
  ASSERT_TRUE(controller_->Heartbeat(beat, &launch).ok());
  const v1::ReportProgressResponse again = progress(3);
  EXPECT_TRUE(again.preempt());
  EXPECT_EQ(again.preempt_reason(), "node n1 was drained (disk swap)");
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(controller_->ListNodes(v1::ListNodesRequest(), &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_TRUE(nodes.nodes(0).cordoned());

  drain.set_node_id("n9");
  EXPECT_EQ(controller_->DrainNode(drain, &drained).code(), absl::StatusCode::kNotFound);
  v1::UncordonNodeRequest uncordon;
  uncordon.set_node_id("n1");
  v1::UncordonNodeResponse uncordoned;
  ASSERT_TRUE(controller_->UncordonNode(uncordon, &uncordoned).ok());
  EXPECT_FALSE(uncordoned.node().cordoned());
  std::vector<std::string> types;
  for (const v1::Event& e : Replay("")) {
    if (e.node_id() == "n1") types.push_back(e.type());
  }
  EXPECT_NE(std::find(types.begin(), types.end(), "node.cordon"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "node.uncordon"), types.end());
}

// Logs were once stored for any job id, attempt and rank a caller named.
TEST_F(ControllerTest, LogsAreStoredOnlyForARankPlacedOnTheSendingNode) {
  StopController();
  options_.log_root = ::testing::TempDir() + "/logs-" + std::to_string(getpid());
  StartController();
  const v1::Job job = Submit();
  ASSERT_TRUE(Register("n1").ok());  // places the job's one rank on n1
  auto append = [&](const std::string& node, const std::string& job_id, int attempt, int rank,
                    int64_t offset) {
    v1::AppendLogsRequest req;
    req.set_node_id(node);
    v1::LogChunk* chunk = req.add_chunks();
    chunk->set_job_id(job_id);
    chunk->set_attempt(attempt);
    chunk->set_world_rank(rank);
    chunk->set_offset(offset);
    chunk->set_data("hello\n");
    v1::AppendLogsResponse resp;
    EXPECT_TRUE(controller_->AppendLogs(req, &resp).ok());
    return resp.sizes(0);
  };
  EXPECT_EQ(append("n1", job.id(), 1, 0, 0), 6);
  // Refused, each acknowledged so that an agent does not resend it forever:
  EXPECT_EQ(append("n2", job.id(), 1, 0, 6), 12);  // another node's rank
  EXPECT_EQ(append("n1", job.id(), 1, 3, 0), 6);   // no such rank
  EXPECT_EQ(append("n1", job.id(), 2, 0, 0), 6);   // no such attempt
  EXPECT_EQ(append("n1", "j-missing", 1, 0, 0), 6);
  v1::GetLogsRequest get;
  get.set_job_id(job.id());
  v1::GetLogsResponse logs;
  ASSERT_TRUE(controller_->GetLogs(get, &logs).ok());
  ASSERT_EQ(logs.chunks_size(), 1);
  EXPECT_EQ(logs.chunks(0).world_rank(), 0);
  EXPECT_EQ(logs.chunks(0).data(), "hello\n");  // not the n2 copy
  EXPECT_FALSE(std::filesystem::exists(options_.log_root + "/j-missing"));
  // GetLogs' argument checks live here, for both transports (REST only parses numbers).
  const std::vector<std::pair<std::string, std::function<void(v1::GetLogsRequest&)>>> bad = {
      {"attempt: -1 is negative", [](auto& r) { r.set_attempt(-1); }},
      {"max_bytes: -5 must not be negative", [](auto& r) { r.set_max_bytes(-5); }},
      {"ranks: -2 is negative", [](auto& r) { r.add_ranks(-2); }},
      {"offsets: -3 is negative", [](auto& r) { r.add_ranks(0); r.add_offsets(-3); }},
      {"offsets: 2 offsets for 1 ranks", [](auto& r) {
         r.add_ranks(0);
         r.add_offsets(1);
         r.add_offsets(2);
       }},
  };
  for (const auto& [message, set] : bad) {
    v1::GetLogsRequest req = get;
    set(req);
    const absl::Status s = controller_->GetLogs(req, &logs);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_NE(s.message().find(message), std::string::npos) << s;
  }
}

TEST_F(ControllerTest, RetentionDeletesFinalJobsAndOldNodeEvents) {
  StopController();
  options_.retention_s = 1;
  options_.retention_sweep_ms = 50;
  StartController();
  const v1::Job done = Submit();
  ASSERT_TRUE(Cancel(done.id()).ok());
  const v1::Job live = Submit();
  ASSERT_TRUE(Register("n1").ok());  // a node event; `live` is placed on it
  auto stored = [&](const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    return controller_->GetJob(req, &resp).code();
  };
  auto node_event_left = [&] {
    for (const v1::Event& e : Replay("")) {
      if (e.job_id().empty()) return true;
    }
    return false;
  };
  // The node event is a moment younger than the cancelled job: a sweep may take one, then the
  // other.
  const auto start = std::chrono::steady_clock::now();
  while ((stored(done.id()) == absl::StatusCode::kOk || node_event_left()) &&
         std::chrono::steady_clock::now() - start < 10s) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(stored(done.id()), absl::StatusCode::kNotFound);
  EXPECT_EQ(stored(live.id()), absl::StatusCode::kOk);  // not final: kept however old
  std::vector<v1::Event> events = Replay("");
  ASSERT_FALSE(events.empty());
  for (const v1::Event& e : events) {
    EXPECT_NE(e.job_id(), done.id());
    EXPECT_FALSE(e.job_id().empty()) << "a node event older than the retention";
  }
}

TEST_F(ControllerTest, MetricsCountJobsAndNodesByState) {
  std::string text = controller_->MetricsText();
  EXPECT_TRUE(HasLine(text, "dhp_jobs{state=\"QUEUED\"} 0")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_nodes{state=\"READY\"} 0")) << text;

  Submit();
  text = controller_->MetricsText();
  EXPECT_TRUE(HasLine(text, "dhp_jobs{state=\"QUEUED\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_jobs{state=\"CANCELLED\"} 0")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_events_total{type=\"job.state\"} 1")) << text;

  ASSERT_TRUE(Register("n1").ok());
  text = controller_->MetricsText();
  EXPECT_TRUE(HasLine(text, "dhp_nodes{state=\"READY\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_nodes{state=\"LOST\"} 0")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_events_total{type=\"node.state\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE dhp_jobs gauge")) << text;
  // The same exposition, but for the tick timings, which a tick may change in between.
  EXPECT_EQ(WithoutTickLines(text), WithoutTickLines(metrics_->RenderText()));
}

TEST_F(ControllerTest, TheHeartbeatTimerMarksSilentNodesLost) {
  StopController();
  options_.nodes.heartbeat_timeout_ms = 200;
  StartController();
  CollectingSink sink;
  std::future<absl::Status> watch = WatchAsync("", /*follow=*/true, sink);
  ASSERT_TRUE(Register("n1").ok());
  ASSERT_TRUE(sink.WaitFor(2));  // registered, then lost, with no call from us
  sink.Cancel();
  EXPECT_TRUE(Await(watch).ok());
  std::vector<v1::Event> events = sink.events();
  EXPECT_EQ(std::get<2>(Rows(events)[1]), "LOST");
  EXPECT_EQ(std::get<3>(Rows(events)[1]).rfind("no heartbeat for 0.", 0), 0u)
      << std::get<3>(Rows(events)[1]);
  EXPECT_TRUE(HasLine(controller_->MetricsText(), "dhp_nodes{state=\"LOST\"} 1"));

  v1::HeartbeatRequest beat;
  beat.set_node_id("n1");
  v1::HeartbeatResponse beat_resp;
  ASSERT_TRUE(controller_->Heartbeat(beat, &beat_resp).ok());
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(controller_->ListNodes(v1::ListNodesRequest(), &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_EQ(nodes.nodes(0).state(), v1::NODE_STATE_READY);
}

TEST_F(ControllerTest, HealthIsOkWhileRunning) { EXPECT_TRUE(controller_->Health().ok()); }

TEST_F(ControllerTest, AfterStopEveryCallIsUnavailableAndReturnsAtOnce) {
  const v1::Job job = Submit();
  controller_->Stop();
  const auto start = std::chrono::steady_clock::now();
  auto expect_unavailable = [](const absl::Status& s, const char* call) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << call;
    EXPECT_EQ(s.message(), "the controller is shutting down") << call;
  };
  expect_unavailable(controller_->Health(), "Health");
  v1::SubmitJobRequest submit;
  submit.set_spec_text(kTinySpec);
  v1::SubmitJobResponse submitted;
  expect_unavailable(controller_->SubmitJob(submit, &submitted), "SubmitJob");
  v1::GetJobRequest get;
  get.set_job_id(job.id());
  v1::GetJobResponse got;
  expect_unavailable(controller_->GetJob(get, &got), "GetJob");
  expect_unavailable(Cancel(job.id()), "CancelJob");
  expect_unavailable(Register("n1"), "RegisterNode");
  v1::KvGetRequest kv;
  kv.mutable_scope()->set_job_id(job.id());
  kv.mutable_scope()->set_attempt(1);
  kv.set_key("k");
  v1::KvGetResponse kv_resp;
  expect_unavailable(controller_->KvGet(kv, &kv_resp), "KvGet");
  v1::WatchJobRequest watch;
  watch.set_follow(true);
  CollectingSink sink;
  expect_unavailable(controller_->WatchJob(watch, sink), "WatchJob");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  controller_->Stop();  // idempotent
}

TEST_F(ControllerTest, StateSurvivesARestart) {
  const v1::Job job = Submit();
  ASSERT_TRUE(Cancel(job.id()).ok());
  StopController();
  StartController();

  v1::GetJobRequest get;
  get.set_job_id(job.id());
  v1::GetJobResponse got;
  ASSERT_TRUE(controller_->GetJob(get, &got).ok());
  EXPECT_EQ(got.job().state(), v1::JOB_STATE_CANCELLED);
  ASSERT_EQ(got.runs_size(), 1);
  EXPECT_EQ(got.runs(0).state(), v1::RUN_STATE_CANCELLED);
  EXPECT_EQ(Replay(job.id()).size(), 3u);

  // A follower of everything sees only new events, numbered after the old ones.
  v1::WatchJobRequest req;
  req.set_follow(true);
  req.set_after_event_id(3);
  CollectingSink sink;
  std::future<absl::Status> watch = std::async(
      std::launch::async, [&] { return controller_->WatchJob(req, sink); });
  const v1::Job second = Submit();
  ASSERT_TRUE(sink.WaitFor(1));
  sink.Cancel();
  EXPECT_TRUE(Await(watch).ok());
  ASSERT_EQ(sink.events().size(), 1u);
  EXPECT_EQ(sink.events()[0].id(), 4);
  EXPECT_EQ(sink.events()[0].job_id(), second.id());
}

// Rows written by an older build that cannot be read back (the issue: a node hostname, a cancel
// reason and a label value with a \xff byte) are quarantined at the first read: listing,
// watching and recovery go on past them, a counter says so, and restarts work.
TEST_F(ControllerTest, UnreadableRowsAreQuarantinedAndRestartsWork) {
  const v1::Job queued = Submit();
  ASSERT_TRUE(Register("n1").ok());  // the next job is placed on it: SCHEDULED, with a run
  ASSERT_TRUE(Register("n2").ok());
  const v1::Job placed = Submit();
  StopController();

  {  // As an older build could have stored them, with the controller stopped.
    absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path_);
    ASSERT_TRUE(db.ok()) << db.status();
    auto poison = [&](const std::string& sql, const std::string& blob) {
      absl::StatusOr<ScopedStatement> update = (*db)->Prepare(sql);
      ASSERT_TRUE(update.ok()) << update.status();
      (*update)->BindBlob(1, blob);
      ASSERT_TRUE((*update)->Run().ok());
      ASSERT_EQ((*db)->changes(), 1) << sql;
    };
    v1::Job job = queued;
    (*job.mutable_spec()->mutable_labels())["team"] = "ab\xff" "cd";
    poison("UPDATE jobs SET proto = ? WHERE id = '" + queued.id() + "'", job.SerializeAsString());
    v1::Node node;
    node.set_id("n2");
    node.set_hostname("h\xffost");
    poison("UPDATE nodes SET proto = ? WHERE id = 'n2'", node.SerializeAsString());
    v1::Event event;
    event.set_type("job.state");
    event.set_reason("x\xffy");
    poison("UPDATE events SET proto = ? WHERE id = 1", event.SerializeAsString());
    poison("UPDATE runs SET proto = ? WHERE job_id = '" + placed.id() + "'", "\xff\xff");
  }

  StartController();  // recovery reads nodes and live jobs: it must get past all of them
  v1::ListJobsResponse list;
  ASSERT_TRUE(controller_->ListJobs(v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).id(), placed.id());
  EXPECT_EQ(list.jobs(0).state(), v1::JOB_STATE_FAILED);  // its run could not be read
  EXPECT_NE(list.jobs(0).message().find("attempt 1 cannot be recovered after a controller "
                                        "restart: job " + placed.id() + " has no run 1"),
            std::string::npos)
      << list.jobs(0).message();
  v1::GetJobRequest get;
  get.set_job_id(queued.id());
  v1::GetJobResponse got;
  absl::Status s = controller_->GetJob(get, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("could not be read"), std::string::npos) << s;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(controller_->ListNodes(v1::ListNodesRequest(), &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_EQ(nodes.nodes(0).id(), "n1");
  std::vector<v1::Event> events = Replay("");
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events[0].id(), 1);  // the unreadable one is gone

  std::string text = controller_->MetricsText();
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantined_rows_total{table=\"jobs\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantined_rows_total{table=\"nodes\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantined_rows_total{table=\"runs\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantined_rows_total{table=\"events\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantined_rows_total{table=\"checkpoints\"} 0")) << text;
  // The queued job's run went with it: two runs are held.
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantine_rows{table=\"runs\"} 2")) << text;

  // Restarting again: nothing left to move, the held rows still show, and it serves.
  StopController();
  StartController();
  text = controller_->MetricsText();
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantined_rows_total{table=\"jobs\"} 0")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantine_rows{table=\"jobs\"} 1")) << text;
  EXPECT_TRUE(HasLine(text, "dhp_store_quarantine_rows{table=\"events\"} 1")) << text;
  v1::ListJobsResponse again;
  ASSERT_TRUE(controller_->ListJobs(v1::ListJobsRequest(), &again).ok());
  EXPECT_EQ(again.jobs_size(), 1);
  EXPECT_TRUE(controller_->Health().ok());
}

}  // namespace
}  // namespace dhp::controller
