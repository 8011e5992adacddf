// The Supervisor's test fixture: an in-memory Store, a JobManager and a fake clock; jobs of
// the tiny model (vision SP 2 x text TP 2 collocated, 2 ranks) on CPU nodes, driven by the calls
// agents and ranks make (heartbeats, progress, checkpoint shards). Shared by supervisor_test
// and supervisor_preempt_test.
#ifndef DHP_CONTROLLER_SUPERVISOR_TEST_UTIL_H_
#define DHP_CONTROLLER_SUPERVISOR_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "controller/job_manager.h"
#include "controller/supervisor.h"
#include "controller/time_util.h"

namespace dhp::controller {

inline constexpr char kRoot[] = "/data/ckpt";

// Tiny model, vision SP 2 x text TP 2 collocated: 2 ranks forming one tensor-parallel group.
inline std::string Spec(const std::string& name, int max_restarts, int priority = 0,
                        int launch_timeout_s = 120, int preemption_grace_s = 120) {
  return "name: " + name + "\nmodel: {preset: tiny}\npriority: " + std::to_string(priority) +
         "\nvision: {parallelism: sequence, degree: 2}\ntext: {parallelism: tensor, degree: 2}\n"
         "training: {max_steps: 10}\ncheckpoint: {every_steps: 5, keep_latest: 2}\n"
         "restart: {max_restarts: " + std::to_string(max_restarts) + ", stall_timeout_s: 30, "
         "launch_timeout_s: " + std::to_string(launch_timeout_s) + ", preemption_grace_s: " +
         std::to_string(preemption_grace_s) + "}\n"
         "data: {datasets: [shapes], registry: {shapes: {annotation_path: data/train.jsonl}}}\n";
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    jobs_ = std::make_unique<JobManager>(*store_, clock_, SpecOptions{kRoot});
    sup_ = std::make_unique<Supervisor>(*store_, clock_, SupervisorOptions{kRoot});
  }

  // Jobs "a" and "b" running on nodes n1 and n2 (2 ranks each; reaching RUNNING at step 1 is
  // written at once), then reported 30 s later at steps 4 and 6: both due for SaveProgress.
  void TwoRunsDue(v1::Job& a, v1::Job& b) {
    AddNode("n1", 2);
    AddNode("n2", 2);
    a = Submit("a");
    b = Submit("b");
    Schedule();
    for (const auto& [job, node] : {std::pair{a, "n1"}, std::pair{b, "n2"}}) {
      ASSERT_EQ(Beat(node).size(), 2u);
      Beat(node, {Status(job, 1, 0, true), Status(job, 1, 1, true)});
      ASSERT_TRUE(Progress(job, 1, 0, 1).ok());
      ASSERT_EQ(Stored(job.id()).state(), v1::JOB_STATE_RUNNING);
    }
    clock_.AdvanceMicros(30000000);
    ASSERT_TRUE(Progress(a, 1, 0, 4).ok());
    ASSERT_TRUE(Progress(b, 1, 0, 6).ok());
  }

  void AddNode(const std::string& id, int cpu_slots) {
    v1::Node node;
    node.set_id(id);
    node.set_state(v1::NODE_STATE_READY);
    node.mutable_resources()->set_cpu_slots(cpu_slots);
    ASSERT_TRUE(store_->PutNode(node, {}).ok());
    sup_->OnNodeChanged(node);
  }

  v1::Job Submit(const std::string& name, int max_restarts = 1, int priority = 0,
                 int launch_timeout_s = 120, int preemption_grace_s = 120) {
    return SubmitText(Spec(name, max_restarts, priority, launch_timeout_s, preemption_grace_s));
  }

  // Validates, admits, stores and queues a spec, as the Controller does for SubmitJob.
  v1::Job SubmitText(const std::string& text) {
    v1::SubmitJobRequest req;
    req.set_spec_text(text);
    absl::StatusOr<v1::JobSpec> spec = jobs_->ValidateSubmission(req);
    EXPECT_TRUE(spec.ok()) << spec.status();
    Supervisor::Admitted demand;
    absl::Status admitted = sup_->CheckAdmission(*spec, &demand);
    EXPECT_TRUE(admitted.ok()) << admitted;
    v1::SubmitJobResponse resp;
    std::vector<v1::Event> events;
    EXPECT_TRUE(jobs_->SubmitValidated(*spec, false, &resp, &events).ok());
    sup_->OnJobQueued(resp.job(), std::move(demand));
    clock_.AdvanceMicros(1000);
    return resp.job();
  }

  void Schedule() {
    std::vector<v1::Event> events;
    ASSERT_TRUE(sup_->Schedule(&events).ok());
  }

  // One heartbeat of `node` reporting `ranks`; returns the ranks it is told to run.
  std::vector<v1::RankLaunch> Beat(const std::string& node,
                                   const std::vector<v1::RankStatus>& ranks = {}) {
    v1::HeartbeatRequest req;
    req.set_node_id(node);
    for (const v1::RankStatus& r : ranks) *req.add_ranks() = r;
    v1::HeartbeatResponse resp;
    std::vector<v1::Event> events;
    absl::Status s = sup_->OnHeartbeat(req, &resp, &events);
    EXPECT_TRUE(s.ok()) << s;
    return {resp.ranks().begin(), resp.ranks().end()};
  }

  static v1::RankStatus Status(const v1::Job& job, int attempt, int rank, bool running,
                               int exit_code = 0, int signal = 0) {
    v1::RankStatus st;
    st.set_job_id(job.id());
    st.set_attempt(attempt);
    st.set_world_rank(rank);
    st.set_state(running ? v1::RANK_PROCESS_STATE_RUNNING : v1::RANK_PROCESS_STATE_EXITED);
    st.set_exit_code(exit_code);
    st.set_signal(signal);
    if (exit_code != 0) st.set_log_tail("loading data\nrank 1: group text.tp0: connection reset\n");
    return st;
  }

  absl::Status Progress(const v1::Job& job, int attempt, int rank, int64_t step,
                        const std::string& waiting_on = "", bool* stop = nullptr) {
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_attempt(attempt);
    req.set_rank(rank);
    req.set_step(step);
    req.set_loss(rank == 0 ? 5.0 - step * 0.1 : NAN);
    req.set_total_steps(10);
    req.set_waiting_on(waiting_on);
    v1::ReportProgressResponse resp;
    std::vector<v1::Event> events;
    absl::Status s = sup_->OnProgress(req, &resp, &events);
    if (stop != nullptr) *stop = resp.stop();
    last_progress_ = resp;
    return s;
  }

  absl::StatusOr<int64_t> RequestCheckpoint(const v1::Job& job) {
    v1::CheckpointJobResponse resp;
    std::vector<v1::Event> events;
    absl::Status s = sup_->RequestCheckpoint(job.id(), &resp, &events);
    if (!s.ok()) return s;
    return resp.at_step();
  }

  absl::StatusOr<v1::Checkpoint> Shard(const v1::Job& job, int attempt, int rank, int64_t step) {
    const v1::Run run = Run(job.id(), attempt);
    v1::ReportCheckpointRequest req;
    req.set_job_id(job.id());
    req.set_attempt(attempt);
    req.set_step(step);
    req.set_world_size(2);
    req.set_path(run.checkpoint_dir() + "/step-" + std::to_string(step));
    req.mutable_shard()->set_rank(rank);
    req.mutable_shard()->set_file("rank-" + std::to_string(rank) + ".safetensors");
    req.mutable_shard()->set_size_bytes(1000 + rank);
    req.mutable_shard()->set_crc32c("0badf00d");
    req.set_write_seconds(0.25 + rank);
    v1::ReportCheckpointResponse resp;
    std::vector<v1::Event> events;
    absl::Status s = sup_->OnCheckpointShard(req, &resp, &events);
    if (!s.ok()) return s;
    return resp.checkpoint();
  }

  // A user cancels the job (JobManager), and the Supervisor hears of it.
  void Cancel(const v1::Job& job) {
    v1::CancelJobRequest req;
    req.set_job_id(job.id());
    v1::CancelJobResponse resp;
    std::vector<v1::Event> events;
    ASSERT_TRUE(jobs_->Cancel(req, &resp, &events).ok());
    ASSERT_TRUE(sup_->OnJobCancelled(resp.job(), &events).ok());
  }

  v1::Job Stored(const std::string& id) { return *store_->GetJob(id); }
  v1::Run Run(const std::string& id, int attempt) {
    for (const v1::Run& r : store_->ListRuns(id)) {
      if (r.attempt() == attempt) return r;
    }
    ADD_FAILURE() << "no run " << attempt;
    return v1::Run();
  }
  std::vector<v1::Event> Events(const std::string& id) { return store_->ListEvents(id, 0, 0); }

  // Places `job`, launches both ranks and reports step 1: RUNNING.
  void StartRunning(const v1::Job& job, int attempt = 1) {
    Schedule();
    ASSERT_EQ(Beat("n1").size(), 2u);
    Beat("n1", {Status(job, attempt, 0, true), Status(job, attempt, 1, true)});
    ASSERT_EQ(Stored(job.id()).state(), v1::JOB_STATE_STARTING);
    const int64_t start = Run(job.id(), attempt).start_step();
    ASSERT_TRUE(Progress(job, attempt, 0, start + 1).ok());
    ASSERT_TRUE(Progress(job, attempt, 1, start + 1).ok());
    ASSERT_EQ(Stored(job.id()).state(), v1::JOB_STATE_RUNNING);
  }

  v1::ReportProgressResponse last_progress_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<Supervisor> sup_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_SUPERVISOR_TEST_UTIL_H_
