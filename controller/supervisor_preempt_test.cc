// The Supervisor's operator requests: checkpoint now, SIGTERM preemption, and the drain of a
// node (PreemptRunsOn) with its grace period.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "controller/supervisor_test_util.h"

namespace dhp::controller {
namespace {

using ::testing::HasSubstr;

TEST_F(SupervisorTest, APreemptedRunIsRequeuedFromItsCheckpointWithoutSpendingARestart) {
  AddNode("n1", 2);
  const v1::Job job = Submit("preempted", /*max_restarts=*/0);
  StartRunning(job);
  ASSERT_TRUE(Shard(job, 1, 0, 7).ok());  // the ranks checkpoint at the step SIGTERM came...
  ASSERT_TRUE(Shard(job, 1, 1, 7).ok());
  Beat("n1", {Status(job, 1, 0, false, 75), Status(job, 1, 1, true)});  // ...then exit 75
  const v1::Job stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_QUEUED);  // with max_restarts 0: nothing spent
  EXPECT_EQ(stored.restart_count(), 0);
  EXPECT_EQ(stored.current_attempt(), 2);
  EXPECT_THAT(stored.message(), HasSubstr("at step 7"));
  EXPECT_EQ(Run(job.id(), 1).state(), v1::RUN_STATE_PREEMPTED);
  EXPECT_EQ(Run(job.id(), 1).reason(),
            "preempted: rank 0 on node n1 stopped after a SIGTERM reached the job, every rank "
            "having checkpointed first (not counted as a restart)");
  EXPECT_TRUE(Run(job.id(), 1).has_end_time());
  EXPECT_EQ(Run(job.id(), 2).start_step(), 7);
}

TEST_F(SupervisorTest, CheckpointNowIsAnsweredToEveryRankUntilAShardOfThatStepOrLaterArrives) {
  AddNode("n1", 2);
  const v1::Job job = Submit("checkpoint-now");
  EXPECT_EQ(RequestCheckpoint(job).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(RequestCheckpoint(job).status().message()),
              HasSubstr("it is QUEUED; only a STARTING or RUNNING job"));
  EXPECT_EQ(RequestCheckpoint(v1::Job()).status().code(), absl::StatusCode::kInvalidArgument);
  v1::Job missing;
  missing.set_id("no-such-job");
  EXPECT_EQ(RequestCheckpoint(missing).status().code(), absl::StatusCode::kNotFound);

  StartRunning(job);
  ASSERT_TRUE(Progress(job, 1, 0, 4).ok());
  EXPECT_FALSE(last_progress_.checkpoint());
  ASSERT_EQ(RequestCheckpoint(job).value_or(-1), 4);
  ASSERT_TRUE(Progress(job, 1, 0, 5).ok());
  EXPECT_TRUE(last_progress_.checkpoint());
  EXPECT_EQ(last_progress_.checkpoint_at_step(), 4);
  EXPECT_EQ(RequestCheckpoint(job).value_or(-1), 4);  // joins the pending one
  ASSERT_TRUE(Progress(job, 1, 1, 5).ok());
  EXPECT_TRUE(last_progress_.checkpoint());
  EXPECT_EQ(last_progress_.checkpoint_at_step(), 4);
  ASSERT_TRUE(Shard(job, 1, 0, 3).ok());  // of an earlier step: not an answer
  ASSERT_TRUE(Progress(job, 1, 0, 5).ok());
  EXPECT_TRUE(last_progress_.checkpoint());
  ASSERT_TRUE(Shard(job, 1, 0, 5).ok());
  ASSERT_TRUE(Progress(job, 1, 1, 6).ok());
  EXPECT_FALSE(last_progress_.checkpoint());
  int requested = 0;
  for (const v1::Event& e : Events(job.id())) {
    if (e.type() == "checkpoint" && e.to_state() == "REQUESTED") {
      ++requested;
      EXPECT_THAT(e.reason(), HasSubstr("at step 4 or the first step boundary after it"));
    }
  }
  EXPECT_EQ(requested, 2);
}

// A checkpoint-now request is stored with the run: a restarted controller (a new Supervisor
// recovered from the same store) still asks the ranks for it, until a checkpoint of that step or
// later is COMPLETE; a run that ends drops it.
TEST_F(SupervisorTest, ACheckpointRequestSurvivesAControllerRestartUntilItIsComplete) {
  AddNode("n1", 2);
  const v1::Job job = Submit("checkpoint-restart");
  StartRunning(job);
  auto restart = [&] {
    sup_ = std::make_unique<Supervisor>(*store_, clock_, SupervisorOptions{kRoot});
    ASSERT_TRUE(sup_->Recover().ok());
  };
  ASSERT_TRUE(Progress(job, 1, 0, 4).ok());
  ASSERT_EQ(RequestCheckpoint(job).value_or(-1), 4);
  EXPECT_EQ(Run(job.id(), 1).checkpoint_requested_at_step(), 4);
  restart();
  for (int rank : {0, 1}) {
    ASSERT_TRUE(Progress(job, 1, rank, 5).ok());
    EXPECT_TRUE(last_progress_.checkpoint()) << "rank " << rank;
    EXPECT_EQ(last_progress_.checkpoint_at_step(), 4);
  }
  // The ranks agree and write at step 5: the first shard answers them, but the stored request
  // stays until the checkpoint is COMPLETE (asking again after a restart is harmless: a rank
  // writes only when asked past its newest checkpoint).
  ASSERT_TRUE(Shard(job, 1, 0, 5).ok());
  ASSERT_TRUE(Progress(job, 1, 0, 5).ok());
  EXPECT_FALSE(last_progress_.checkpoint());
  EXPECT_EQ(Run(job.id(), 1).checkpoint_requested_at_step(), 4);
  absl::StatusOr<v1::Checkpoint> done = Shard(job, 1, 1, 5);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::CHECKPOINT_STATE_COMPLETE);
  EXPECT_FALSE(Run(job.id(), 1).has_checkpoint_requested_at_step());
  restart();
  ASSERT_TRUE(Progress(job, 1, 0, 6).ok());
  EXPECT_FALSE(last_progress_.checkpoint());

  // Asked again, then cancelled: the ended run keeps no request.
  ASSERT_EQ(RequestCheckpoint(job).value_or(-1), 6);
  EXPECT_EQ(Run(job.id(), 1).checkpoint_requested_at_step(), 6);
  Cancel(job);
  v1::RankStatus r0 = Status(job, 1, 0, false, 0, 15), r1 = Status(job, 1, 1, false, 0, 15);
  r0.set_stopped_by_agent(true);
  r1.set_stopped_by_agent(true);
  Beat("n1", {r0, r1});
  ASSERT_EQ(Run(job.id(), 1).state(), v1::RUN_STATE_CANCELLED);
  EXPECT_FALSE(Run(job.id(), 1).has_checkpoint_requested_at_step());
}

class DrainTest : public SupervisorTest {
 protected:
  // DrainNode as the Controller runs it: the node stored cordoned, the Supervisor told, then
  // the runs on it asked to stop. Returns the job ids asked.
  std::vector<std::string> Drain(const std::string& node_id) {
    v1::Node node = *store_->GetNode(node_id);
    node.set_cordoned(true);
    EXPECT_TRUE(store_->PutNode(node, {}).ok());
    sup_->OnNodeChanged(node);
    std::vector<std::string> jobs;
    std::vector<v1::Event> events;
    absl::Status s =
        sup_->PreemptRunsOn(node_id, "node " + node_id + " was drained", &jobs, &events);
    EXPECT_TRUE(s.ok()) << s;
    return jobs;
  }
  void Uncordon(const std::string& node_id) {
    v1::Node node = *store_->GetNode(node_id);
    node.set_cordoned(false);
    EXPECT_TRUE(store_->PutNode(node, {}).ok());
    sup_->OnNodeChanged(node);
  }
  void CheckStalls() {
    std::vector<v1::Event> events;
    ASSERT_TRUE(sup_->CheckStalls(&events).ok());
  }
  bool HasEvent(const v1::Job& job, const std::string& type, const std::string& text) {
    for (const v1::Event& e : Events(job.id())) {
      if (e.type() == type && e.reason().find(text) != std::string::npos) return true;
    }
    return false;
  }
};

TEST_F(DrainTest, TheRunsOnADrainedNodeCheckpointStopAndWaitForAnotherNode) {
  AddNode("n1", 2);
  const v1::Job job = Submit("drained", /*max_restarts=*/0);
  StartRunning(job);
  ASSERT_TRUE(Progress(job, 1, 0, 3).ok());
  EXPECT_FALSE(last_progress_.preempt());
  EXPECT_EQ(Drain("n1"), std::vector<std::string>{job.id()});
  EXPECT_TRUE(HasEvent(job, "preempt",
                       "node n1 was drained: every rank checkpoints at its next step boundary "
                       "(after step 3) and stops, within restart.preemption_grace_s 120 s"));
  // Every rank is told, with every report, until the run ends.
  for (int rank : {0, 1}) {
    ASSERT_TRUE(Progress(job, 1, rank, 4).ok());
    EXPECT_TRUE(last_progress_.preempt());
    EXPECT_EQ(last_progress_.preempt_reason(), "node n1 was drained");
    EXPECT_FALSE(last_progress_.stop());
  }
  ASSERT_TRUE(Shard(job, 1, 0, 4).ok());
  ASSERT_TRUE(Shard(job, 1, 1, 4).ok());
  Beat("n1", {Status(job, 1, 0, false, 75), Status(job, 1, 1, false, 75)});
  const v1::Run ended = Run(job.id(), 1);
  EXPECT_EQ(ended.state(), v1::RUN_STATE_PREEMPTED);
  EXPECT_EQ(ended.reason(),
            "preempted: rank 0 on node n1 stopped after node n1 was drained, every rank having "
            "checkpointed first (not counted as a restart)");
  EXPECT_EQ(ended.last_step(), 4);
  v1::Job stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(stored.restart_count(), 0);
  EXPECT_EQ(Run(job.id(), 2).start_step(), 4);  // no step lost
  // n1 is cordoned: the job waits, and n1's agent is told to run nothing.
  Schedule();
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_QUEUED);
  EXPECT_TRUE(Beat("n1").empty());
  EXPECT_EQ(sup_->scheduler().free_slots(), 0);
  Uncordon("n1");
  Schedule();
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Beat("n1").size(), 2u);
}

TEST_F(DrainTest, ADrainTouchesOnlyTheRunsWithRanksOnTheNode) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  const v1::Job a = Submit("on-n1");
  const v1::Job b = Submit("on-n2");
  Schedule();
  ASSERT_EQ(Run(a.id(), 1).placement(0).node_id(), "n1");
  ASSERT_EQ(Run(b.id(), 1).placement(0).node_id(), "n2");
  Beat("n1", {Status(a, 1, 0, true), Status(a, 1, 1, true)});
  Beat("n2", {Status(b, 1, 0, true), Status(b, 1, 1, true)});
  for (const v1::Job* j : {&a, &b}) {
    ASSERT_TRUE(Progress(*j, 1, 0, 1).ok());
    ASSERT_TRUE(Progress(*j, 1, 1, 1).ok());
  }
  EXPECT_EQ(Drain("n2"), std::vector<std::string>{b.id()});
  ASSERT_TRUE(Progress(a, 1, 0, 2).ok());
  EXPECT_FALSE(last_progress_.preempt());
  ASSERT_TRUE(Progress(b, 1, 0, 2).ok());
  EXPECT_TRUE(last_progress_.preempt());
  EXPECT_EQ(Stored(a.id()).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(DrainTest, AnAttemptWithoutAFinishedStepEndsAtOnce) {
  AddNode("n1", 2);
  const v1::Job job = Submit("starting", /*max_restarts=*/0);
  Schedule();
  Beat("n1", {Status(job, 1, 0, true), Status(job, 1, 1, true)});
  ASSERT_EQ(Stored(job.id()).state(), v1::JOB_STATE_STARTING);
  EXPECT_EQ(Drain("n1"), std::vector<std::string>{job.id()});
  const v1::Run ended = Run(job.id(), 1);
  EXPECT_EQ(ended.state(), v1::RUN_STATE_PREEMPTED);
  EXPECT_EQ(ended.reason(),
            "preempted: node n1 was drained before the attempt finished a step; it resumes "
            "from step 0 (not counted as a restart)");
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Stored(job.id()).restart_count(), 0);
}

TEST_F(DrainTest, RanksThatDoNotStopWithinTheGracePeriodAreStopped) {
  AddNode("n1", 2);
  const v1::Job job = Submit("slow", /*max_restarts=*/0, 0, 120, /*preemption_grace_s=*/10);
  StartRunning(job);
  Drain("n1");
  clock_.AdvanceMicros(6 * 1000000);
  EXPECT_EQ(Drain("n1"), std::vector<std::string>{job.id()});  // asked again: same deadline
  clock_.AdvanceMicros(3 * 1000000);
  CheckStalls();
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_RUNNING);
  clock_.AdvanceMicros(2 * 1000000);
  CheckStalls();
  const v1::Run ended = Run(job.id(), 1);
  EXPECT_EQ(ended.state(), v1::RUN_STATE_PREEMPTED);
  EXPECT_EQ(ended.reason(),
            "preempted: node n1 was drained; the ranks did not checkpoint and stop within "
            "restart.preemption_grace_s 10 s and were stopped; the next attempt resumes from "
            "the newest complete checkpoint (not counted as a restart)");
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Stored(job.id()).restart_count(), 0);
  EXPECT_TRUE(Beat("n1").empty());  // the agent stops the ranks
}

}  // namespace
}  // namespace dhp::controller
