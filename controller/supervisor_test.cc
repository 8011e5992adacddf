#include "controller/supervisor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "absl/strings/str_replace.h"
#include "common/clock.h"
#include "controller/job_manager.h"
#include "controller/supervisor_test_util.h"
#include "controller/time_util.h"

namespace dhp::controller {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(SupervisorTest, AJobRunsToSuccessWithItsCheckpoint) {
  AddNode("n1", 2);
  const v1::Job job = Submit("ok");
  Schedule();
  v1::Job stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(stored.message(), "placed on n1: cpu 0,1 after 0.0 s in the queue");
  const v1::Run run = Run(job.id(), 1);
  EXPECT_EQ(run.state(), v1::RUN_STATE_STARTING);
  ASSERT_EQ(run.placement_size(), 2);
  EXPECT_EQ(run.placement(1).node_id(), "n1");
  EXPECT_EQ(run.placement(1).slot(), 1);
  EXPECT_EQ(run.checkpoint_dir(), std::string(kRoot) + "/ok/" + job.id() + "/attempt-1");
  EXPECT_EQ(sup_->scheduler().free_slots(), 0);

  const std::vector<v1::RankLaunch> launches = Beat("n1");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].world_rank(), 0);
  EXPECT_EQ(launches[1].world_rank(), 1);
  EXPECT_EQ(launches[1].world_size(), 2);
  EXPECT_EQ(launches[1].preemption_grace_s(), 120);  // the spec's restart.preemption_grace_s
  EXPECT_EQ(launches[1].slot(), 1);
  EXPECT_TRUE(Beat("n2").empty());  // nothing for other nodes

  Beat("n1", {Status(job, 1, 0, true)});
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_SCHEDULED);  // rank 1 not launched yet
  Beat("n1", {Status(job, 1, 0, true), Status(job, 1, 1, true)});
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_STARTING);
  ASSERT_TRUE(Progress(job, 1, 1, 0).ok());  // a report before any step: not yet training
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_STARTING);
  ASSERT_TRUE(Progress(job, 1, 0, 1).ok());
  stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(stored.latest_step(), 1);
  EXPECT_DOUBLE_EQ(stored.latest_loss(), 4.9);
  EXPECT_EQ(stored.total_steps(), 10);
  EXPECT_EQ(Run(job.id(), 1).state(), v1::RUN_STATE_RUNNING);

  absl::StatusOr<v1::Checkpoint> c = Shard(job, 1, 1, 10);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state(), v1::CHECKPOINT_STATE_PARTIAL);
  c = Shard(job, 1, 1, 10);  // a retried report changes nothing
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->shards_size(), 1);
  EXPECT_TRUE(sup_->checkpoints().TakeManifests().empty());  // not complete yet
  c = Shard(job, 1, 0, 10);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state(), v1::CHECKPOINT_STATE_COMPLETE);
  const auto manifests = sup_->checkpoints().TakeManifests();
  ASSERT_EQ(manifests.size(), 1u);
  EXPECT_EQ(manifests[0].first, run.checkpoint_dir() + "/step-10");
  EXPECT_THAT(manifests[0].second, HasSubstr("\"crc32c\": \"0badf00d\""));
  EXPECT_THAT(manifests[0].second, HasSubstr("\"state\": \"CHECKPOINT_STATE_COMPLETE\""));
  EXPECT_EQ(c->size_bytes(), 2001);
  EXPECT_DOUBLE_EQ(c->write_seconds(), 1.25);
  ASSERT_TRUE(Progress(job, 1, 0, 10).ok());

  Beat("n1", {Status(job, 1, 0, false), Status(job, 1, 1, true)});
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_RUNNING);
  Beat("n1", {Status(job, 1, 0, false), Status(job, 1, 1, false)});
  stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(stored.message(), "all 2 ranks finished at step 10");
  EXPECT_EQ(stored.latest_step(), 10);
  EXPECT_EQ(Run(job.id(), 1).state(), v1::RUN_STATE_SUCCEEDED);
  EXPECT_EQ(sup_->scheduler().free_slots(), 2);  // this heartbeat showed nothing running
  EXPECT_TRUE(Beat("n1").empty());
}

TEST_F(SupervisorTest, AReportMixingRunsAppliesOnlyTheRanksPlacedOnTheReportingNode) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  const v1::Job a = Submit("a");
  const v1::Job b = Submit("b");
  Schedule();
  ASSERT_EQ(Run(a.id(), 1).placement(0).node_id(), "n1");
  ASSERT_EQ(Run(b.id(), 1).placement(0).node_id(), "n2");
  v1::Job unknown = a;
  unknown.set_id("j-not-a-job");
  // Interleaved, with ranks of b (placed on n2) and of no run at all: only a's count.
  Beat("n1", {Status(b, 1, 0, true), Status(a, 1, 1, true), Status(unknown, 1, 0, true),
              Status(b, 1, 1, true), Status(a, 1, 0, true)});
  EXPECT_EQ(Stored(a.id()).state(), v1::JOB_STATE_STARTING);
  EXPECT_EQ(Stored(b.id()).state(), v1::JOB_STATE_SCHEDULED);
  Beat("n2", {Status(b, 1, 1, true)});
  EXPECT_EQ(Stored(b.id()).state(), v1::JOB_STATE_SCHEDULED);  // rank 0 not launched yet
  Beat("n2", {Status(b, 1, 1, true), Status(b, 1, 0, true)});
  EXPECT_EQ(Stored(b.id()).state(), v1::JOB_STATE_STARTING);
  // a's agent still reports both ranks: a stays as it was (no rank counted as lost).
  Beat("n1", {Status(a, 1, 0, true), Status(a, 1, 1, true)});
  EXPECT_EQ(Stored(a.id()).state(), v1::JOB_STATE_STARTING);
}

TEST_F(SupervisorTest, ARankThatFailsRestartsTheJobFromItsCheckpoint) {
  AddNode("n1", 2);
  const v1::Job job = Submit("restart", /*max_restarts=*/1);
  StartRunning(job);
  ASSERT_TRUE(Shard(job, 1, 0, 5).ok());
  ASSERT_TRUE(Shard(job, 1, 1, 5).ok());
  const int64_t ckpt = store_->ListCheckpoints(job.id())[0].id();

  // Rank 1 dies; rank 0 still runs: the old attempt is no longer wanted, its slots stay held.
  const std::vector<v1::RankLaunch> wanted =
      Beat("n1", {Status(job, 1, 0, true), Status(job, 1, 1, false, 1)});
  EXPECT_TRUE(wanted.empty());
  v1::Job stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(stored.current_attempt(), 2);
  EXPECT_EQ(stored.restart_count(), 1);
  EXPECT_EQ(stored.message(),
            "restart 1 of 1 from checkpoint " + std::to_string(ckpt) + " at step 5");
  EXPECT_EQ(Run(job.id(), 1).state(), v1::RUN_STATE_FAILED);
  EXPECT_EQ(Run(job.id(), 1).reason(),
            "rank 1 on node n1 exited with code 1: rank 1: group text.tp0: connection reset");
  EXPECT_EQ(Run(job.id(), 2).resume_checkpoint_id(), ckpt);
  EXPECT_EQ(Run(job.id(), 2).start_step(), 5);
  // The ranks reported step 1 only, but saved step 5: the failed run did reach it, and the
  // next run never starts "from" a step after the previous one's last.
  EXPECT_EQ(Run(job.id(), 1).last_step(), 5);
  EXPECT_EQ(stored.latest_step(), 5);
  Schedule();
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_QUEUED);  // rank 0 of attempt 1 still runs
  EXPECT_THAT(Stored(job.id()).message(), HasSubstr("waiting"));
  bool stop = false;
  ASSERT_TRUE(Progress(job, 2, 0, 6, "", &stop).ok());
  EXPECT_TRUE(stop);  // attempt 2 is not placed yet
  EXPECT_EQ(Progress(job, 1, 0, 6).code(), absl::StatusCode::kFailedPrecondition);

  Beat("n1", {Status(job, 1, 0, false, 0, 15), Status(job, 1, 1, false, 1)});  // gone
  Schedule();
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_SCHEDULED);
  const std::vector<v1::RankLaunch> next = Beat("n1");
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].attempt(), 2);

  // Attempt 2 fails too: no restarts left.
  StartRunning(job, 2);
  Beat("n1", {Status(job, 2, 0, false, 0, 9), Status(job, 2, 1, true)});
  stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(stored.message(), "rank 0 on node n1 was killed by signal 9 (Killed); all 1 restarts used");
}

TEST_F(SupervisorTest, WithoutRestartsAFailureFailsTheJob) {
  AddNode("n1", 2);
  const v1::Job job = Submit("fail", /*max_restarts=*/0);
  StartRunning(job);
  Beat("n1", {Status(job, 1, 0, true), Status(job, 1, 1, false, 2)});
  const v1::Job stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(stored.message(), HasSubstr("rank 1 on node n1 exited with code 2"));
  EXPECT_THAT(stored.message(), HasSubstr("automatic restarts are off (restart.max_restarts 0)"));
}

TEST_F(SupervisorTest, AKilledRankIsTheCauseWhenItsPeersFailInTheSameReport) {
  AddNode("n1", 2);
  const v1::Job job = Submit("killed", /*max_restarts=*/0);
  StartRunning(job);
  // Rank 1 was SIGKILLed; rank 0 then failed in a collective. Rank 0 comes first in the report.
  Beat("n1", {Status(job, 1, 0, false, 1), Status(job, 1, 1, false, 0, 9)});
  EXPECT_EQ(Run(job.id(), 1).reason(), "rank 1 on node n1 was killed by signal 9 (Killed)");
}

TEST_F(SupervisorTest, CancelCompletesWhenTheAgentReportsTheRanksGone) {
  AddNode("n1", 2);
  const v1::Job job = Submit("cancel");
  StartRunning(job);
  Cancel(job);
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_CANCELLING);
  bool stop = false;
  ASSERT_TRUE(Progress(job, 1, 0, 2, "", &stop).ok());
  EXPECT_TRUE(stop);
  EXPECT_TRUE(Beat("n1", {Status(job, 1, 0, true), Status(job, 1, 1, true)}).empty());
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_CANCELLING);
  v1::RankStatus killed = Status(job, 1, 0, false, 0, 15);
  killed.set_stopped_by_agent(true);
  Beat("n1", {killed});
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Stored(job.id()).message(), "cancelled by user; every rank has stopped");
  EXPECT_EQ(Run(job.id(), 1).state(), v1::RUN_STATE_CANCELLED);
  EXPECT_EQ(sup_->scheduler().free_slots(), 2);
}

TEST_F(SupervisorTest, StepFiguresAreExactAtTransitionsAndTheRunningMessageIsCurrent) {
  AddNode("n1", 2);
  const v1::Job job = Submit("figures");
  StartRunning(job);
  EXPECT_EQ(Stored(job.id()).message(), "training: step 1 of 10 done");
  ASSERT_TRUE(Progress(job, 1, 0, 2).ok());  // not stored: SaveProgress writes it later
  EXPECT_EQ(Stored(job.id()).latest_step(), 1);
  v1::Job read = Stored(job.id());
  v1::Run run = Run(job.id(), 1);
  sup_->OverlayProgress(read, &run);  // what every read of the job shows meanwhile
  EXPECT_EQ(read.latest_step(), 2);
  EXPECT_EQ(read.message(), "training: step 2 of 10 done");
  EXPECT_EQ(run.last_step(), 2);
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());  // written less than 30 s ago: not yet
  EXPECT_EQ(Stored(job.id()).latest_step(), 1);
  clock_.AdvanceMicros(30000000);
  ASSERT_TRUE(Progress(job, 1, 0, 3).ok());
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());
  EXPECT_EQ(Stored(job.id()).latest_step(), 3);
  EXPECT_EQ(Stored(job.id()).message(), "training: step 3 of 10 done");
  EXPECT_EQ(Run(job.id(), 1).last_step(), 3);
  EXPECT_TRUE(events.empty());
  ASSERT_TRUE(Progress(job, 1, 0, 4).ok());  // not stored yet when the user cancels

  Cancel(job);
  bool stop = false;
  ASSERT_TRUE(Progress(job, 1, 1, 5, "", &stop).ok());  // finished before it heard the stop
  EXPECT_TRUE(stop);
  v1::RankStatus r0 = Status(job, 1, 0, false, 0, 15), r1 = Status(job, 1, 1, false, 0, 15);
  r0.set_stopped_by_agent(true);
  r1.set_stopped_by_agent(true);
  Beat("n1", {r0, r1});
  const v1::Job stored = Stored(job.id());
  ASSERT_EQ(stored.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(stored.latest_step(), 5);
  EXPECT_DOUBLE_EQ(stored.latest_loss(), 5.0 - 4 * 0.1);  // rank 0's last loss (rank 1 sends none)
  EXPECT_EQ(Run(job.id(), 1).last_step(), 5);
}

TEST_F(SupervisorTest, SaveProgressWritesTheDueRunsTogetherAndTheLastStepAtOnce) {
  v1::Job a, b;
  TwoRunsDue(a, b);
  if (HasFatalFailure()) return;
  EXPECT_EQ(Stored(a.id()).latest_step(), 1);
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());
  EXPECT_EQ(Stored(a.id()).latest_step(), 4);
  EXPECT_EQ(Stored(b.id()).latest_step(), 6);
  EXPECT_DOUBLE_EQ(Stored(b.id()).latest_loss(), 5.0 - 6 * 0.1);
  ASSERT_TRUE(Progress(a, 1, 0, 10).ok());  // the last step (total 10): written at once
  EXPECT_EQ(Stored(a.id()).latest_step(), 10);
  EXPECT_EQ(Stored(a.id()).message(), "training: step 10 of 10 done");
  ASSERT_TRUE(Progress(b, 1, 0, 7).ok());  // at shutdown: everything unsaved, due or not
  ASSERT_TRUE(sup_->SaveProgress(&events, /*all=*/true).ok());
  EXPECT_EQ(Stored(b.id()).latest_step(), 7);
}

TEST_F(SupervisorTest, ProgressWritesKeepTheJobFoundByItsLabels) {
  AddNode("n1", 2);
  const v1::Job job = SubmitText(Spec("a", 1) + "labels: {team: vision, tier: gold}\n");
  StartRunning(job);  // RUNNING: a Transition
  if (HasFatalFailure()) return;
  clock_.AdvanceMicros(30000000);
  ASSERT_TRUE(Progress(job, 1, 0, 4).ok());
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());  // written without its labels' rows
  ASSERT_EQ(Stored(job.id()).latest_step(), 4);
  Cancel(job);  // and the Transitions that end the run
  v1::RankStatus killed = Status(job, 1, 0, false, 0, 15);
  killed.set_stopped_by_agent(true);
  Beat("n1", {killed});
  JobQuery query;
  query.labels = {{"team", "vision"}, {"tier", "gold"}};
  absl::StatusOr<JobPage> page = store_->ListJobs(query);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].id(), job.id());
  EXPECT_EQ(page->jobs[0].state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(page->jobs[0].latest_step(), 4);
}

TEST_F(SupervisorTest, SaveProgressWritesAtMostABatchOfRunsPerCall) {
  SupervisorOptions options{kRoot};
  options.progress_save_batch = 1;
  sup_ = std::make_unique<Supervisor>(*store_, clock_, options);
  v1::Job a, b;
  TwoRunsDue(a, b);
  if (HasFatalFailure()) return;
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());  // one of the two due runs
  EXPECT_EQ((Stored(a.id()).latest_step() == 4) + (Stored(b.id()).latest_step() == 6), 1);
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());  // the other
  EXPECT_EQ(Stored(a.id()).latest_step(), 4);
  EXPECT_EQ(Stored(b.id()).latest_step(), 6);
}

TEST_F(SupervisorTest, SaveProgressVisitsOnlyTheRunsWhoseFiguresAreDue) {
  constexpr int kRuns = 20;
  std::vector<v1::Job> jobs;
  for (int i = 0; i < kRuns; ++i) {
    AddNode("n" + std::to_string(i), 2);
    jobs.push_back(Submit("j" + std::to_string(i)));
  }
  Schedule();
  for (int i = 0; i < kRuns; ++i) {
    const std::string node = "n" + std::to_string(i);
    ASSERT_EQ(Beat(node).size(), 2u);
    Beat(node, {Status(jobs[i], 1, 0, true), Status(jobs[i], 1, 1, true)});
    ASSERT_TRUE(Progress(jobs[i], 1, 0, 1).ok());  // to RUNNING: written at once
  }
  clock_.AdvanceMicros(30000000);
  ASSERT_TRUE(Progress(jobs[7], 1, 0, 4).ok());
  std::vector<v1::Event> events;
  const int64_t before = sup_->progress_runs_visited();
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());
  EXPECT_EQ(sup_->progress_runs_visited() - before, 1);  // not the 19 with nothing new
  EXPECT_EQ(Stored(jobs[7].id()).latest_step(), 4);
  ASSERT_TRUE(Progress(jobs[7], 1, 0, 5).ok());  // saved just now: due 30 s on
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());
  EXPECT_EQ(Stored(jobs[7].id()).latest_step(), 4);
  clock_.AdvanceMicros(30000000);
  ASSERT_TRUE(sup_->SaveProgress(&events).ok());
  EXPECT_EQ(Stored(jobs[7].id()).latest_step(), 5);
  EXPECT_EQ(sup_->progress_runs_visited() - before, 2);
}

TEST_F(SupervisorTest, AnAgentThatRestartedEndsTheAttemptAtOnceWithoutARestartCounted) {
  AddNode("n1", 2);
  const v1::Job job = Submit("agent-restart", /*max_restarts=*/1);
  StartRunning(job);
  ASSERT_TRUE(Shard(job, 1, 0, 5).ok());
  ASSERT_TRUE(Shard(job, 1, 1, 5).ok());
  // A heartbeat that still carries rank 0 only: rank 1 is neither running nor exited.
  EXPECT_EQ(Beat("n1", {Status(job, 1, 0, true)}).size(), 0u);
  const v1::Job stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(stored.current_attempt(), 2);
  EXPECT_EQ(stored.restart_count(), 0);  // not spent: no rank failed
  EXPECT_EQ(Run(job.id(), 1).reason(),
            "the agent on node n1 no longer reports rank 1, which it had launched: the agent "
            "restarted and its ranks ended with it (not counted as a restart)");
  EXPECT_EQ(Run(job.id(), 2).start_step(), 5);
  // The dead attempt is never started again: the agent is asked for nothing until it is gone.
  EXPECT_TRUE(Beat("n1").empty());
  Schedule();
  const std::vector<v1::RankLaunch> next = Beat("n1");
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].attempt(), 2);
}

TEST_F(SupervisorTest, AnAgentThatRestartedWhileTheControllerWasDownEndsTheAttempt) {
  AddNode("n1", 2);
  const v1::Job job = Submit("agent-restart-recover");
  StartRunning(job);
  sup_ = std::make_unique<Supervisor>(*store_, clock_, SupervisorOptions{kRoot});
  ASSERT_TRUE(sup_->Recover().ok());
  EXPECT_TRUE(Beat("n1").empty());  // the new agent runs nothing: attempt 1 is not started again
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Stored(job.id()).current_attempt(), 2);
  EXPECT_EQ(Stored(job.id()).restart_count(), 0);
  EXPECT_THAT(Run(job.id(), 1).reason(), HasSubstr("no longer reports ranks 0, 1"));
}

TEST_F(SupervisorTest, AStalledRunFailsNamingTheSilentRankAndTheWaitingOne) {
  AddNode("n1", 2);
  const v1::Job job = Submit("stall");
  StartRunning(job);
  clock_.AdvanceMicros(27'000'000);
  ASSERT_TRUE(Progress(job, 1, 0, 1, "all_reduce on group text.tp0 (call 7) for 19 s").ok());
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->CheckStalls(&events).ok());
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_RUNNING);  // 27 s < 30 s
  clock_.AdvanceMicros(4'000'000);
  ASSERT_TRUE(sup_->CheckStalls(&events).ok());
  const v1::Run failed = Run(job.id(), 1);
  EXPECT_EQ(failed.state(), v1::RUN_STATE_FAILED);
  EXPECT_EQ(failed.reason(),
            "no progress for 31 s (restart.stall_timeout_s 30) at step 1; stalled: rank 1 "
            "(node n1) silent for 31 s after step 1; rank 0 waits in all_reduce on group "
            "text.tp0 (call 7) for 19 s");
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_QUEUED);  // restart 1 of 1
}

TEST_F(SupervisorTest, RanksNeverReportedRunningEndTheAttemptAtTheLaunchDeadline) {
  AddNode("n1", 2);
  const v1::Job job = Submit("launch", 1, 0, 10);
  Schedule();
  ASSERT_EQ(Beat("n1").size(), 2u);  // the node accepts both ranks...
  Beat("n1", {Status(job, 1, 0, true)});  // ...but only rank 0 ever starts
  std::vector<v1::Event> events;
  clock_.AdvanceMicros(9'000'000);
  ASSERT_TRUE(sup_->CheckStalls(&events).ok());
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_SCHEDULED);  // 9 s < 10 s
  clock_.AdvanceMicros(2'000'000);
  ASSERT_TRUE(sup_->CheckStalls(&events).ok());
  const v1::Run failed = Run(job.id(), 1);
  EXPECT_EQ(failed.state(), v1::RUN_STATE_FAILED);
  EXPECT_EQ(failed.reason(), "ranks placed 11 s ago were never reported running "
                             "(restart.launch_timeout_s 10): node n1: ranks 1");
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_QUEUED);  // restart 1 of 1
  EXPECT_EQ(Stored(job.id()).restart_count(), 1);
  // The GPUs come back once the node confirms nothing of the attempt runs, and the next
  // attempt is placed there.
  EXPECT_EQ(sup_->scheduler().free_slots(), 0);
  EXPECT_TRUE(Beat("n1", {Status(job, 1, 0, false, 0, 15)}).empty());
  EXPECT_EQ(sup_->scheduler().free_slots(), 2);
  Schedule();
  const std::vector<v1::RankLaunch> next = Beat("n1");
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].attempt(), 2);
}

TEST_F(SupervisorTest, ALaunchedRunIsNotEndedByTheLaunchDeadline) {
  AddNode("n1", 2);
  const v1::Job job = Submit("launched", 1, 0, 10);
  StartRunning(job);
  clock_.AdvanceMicros(20'000'000);  // past the launch deadline, within the stall timeout
  ASSERT_TRUE(Progress(job, 1, 0, 2).ok());
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->CheckStalls(&events).ok());
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Run(job.id(), 1).state(), v1::RUN_STATE_RUNNING);
}

// The ranks of all placed runs are asked to share heartbeat.progress_reports_per_s, and a rank
// keeping to the slower pace it was asked for is not named silent when its run stalls.
TEST_F(SupervisorTest, RanksShareTheProgressBudgetAndKeepingToItsPaceIsNotSilence) {
  SupervisorOptions options{kRoot};
  options.progress_reports_per_s = 1;
  sup_ = std::make_unique<Supervisor>(*store_, clock_, options);
  AddNode("n1", 2);
  const v1::Job a = Submit("a", 0);
  StartRunning(a);
  EXPECT_EQ(last_progress_.next_report_ms(), 2000);  // 2 ranks, 1 report a second in all
  AddNode("n2", 2);
  const v1::Job b = SubmitText(
      absl::StrReplaceAll(Spec("b", 0), {{"stall_timeout_s: 30", "stall_timeout_s: 300"}}));
  Schedule();
  ASSERT_EQ(Beat("n2").size(), 2u);
  EXPECT_EQ(sup_->NextReportMs(), 4000);
  ASSERT_TRUE(Progress(a, 1, 0, 2).ok());
  ASSERT_TRUE(Progress(a, 1, 1, 2).ok());
  EXPECT_EQ(last_progress_.next_report_ms(), 4000);
  clock_.AdvanceMicros(23'000'000);
  ASSERT_TRUE(Progress(a, 1, 1, 2).ok());  // rank 1's last report: 8 s before the check
  clock_.AdvanceMicros(7'000'000);
  ASSERT_TRUE(Progress(a, 1, 0, 2).ok());
  clock_.AdvanceMicros(1'000'000);
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->CheckStalls(&events).ok());
  // 8 s without a report is within 2.5x the 4 s pace (at the rank's own pace, 5 s would be).
  EXPECT_EQ(Run(a.id(), 1).reason(),
            "no progress for 31 s (restart.stall_timeout_s 30) at step 2");
  // Once a's ranks are gone, b's two ranks share the budget.
  EXPECT_TRUE(Beat("n1", {Status(a, 1, 0, false, 0, 15), Status(a, 1, 1, false, 0, 15)}).empty());
  ASSERT_TRUE(sup_->CheckStalls(&events).ok());
  EXPECT_EQ(sup_->runs().size(), 1u);
  ASSERT_TRUE(Progress(b, 1, 0, 0).ok());
  EXPECT_EQ(last_progress_.next_report_ms(), 2000);
  // Not asked for when there is no budget.
  options.progress_reports_per_s = 0;
  EXPECT_EQ(Supervisor(*store_, clock_, options).NextReportMs(), 0);
}

// One heartbeat looks at the ranks placed on its node and at nothing else, however many runs
// the rest of the cluster holds.
TEST_F(SupervisorTest, AHeartbeatVisitsOnlyTheRanksOfItsOwnNode) {
  auto fill = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      AddNode("n" + std::to_string(i), 2);
      Submit("job" + std::to_string(i));
    }
    Schedule();
  };
  auto visits = [&](const std::string& node, size_t* launches) {
    const int64_t before = sup_->ranks_visited();
    *launches = Beat(node).size();
    return sup_->ranks_visited() - before;
  };
  fill(0, 10);
  size_t launches = 0;
  EXPECT_EQ(visits("n3", &launches), 2);
  EXPECT_EQ(launches, 2u);
  fill(10, 200);
  ASSERT_EQ(sup_->runs().size(), 200u);
  EXPECT_EQ(visits("n3", &launches), 2);
  EXPECT_EQ(launches, 2u);
  EXPECT_EQ(visits("n150", &launches), 2);
  AddNode("idle", 2);  // nothing queued is left to place there
  EXPECT_EQ(visits("idle", &launches), 0);
  EXPECT_EQ(launches, 0u);
}

// A submit behind a long queue tries only the new job; a change of slots brings a full pass.
TEST_F(SupervisorTest, NewJobsAreScheduledWithoutAPassOverTheQueue) {
  AddNode("n1", 2);
  const v1::Job first = Submit("first");
  Schedule();
  ASSERT_EQ(Stored(first.id()).state(), v1::JOB_STATE_SCHEDULED);
  Submit("second");
  Schedule();  // the pass before placed a job: this one goes over the whole queue
  const int64_t full = sup_->full_passes();
  std::vector<v1::Job> waiting;
  for (int i = 0; i < 50; ++i) {
    waiting.push_back(Submit("w" + std::to_string(i)));
    Schedule();
  }
  EXPECT_EQ(sup_->full_passes(), full);
  EXPECT_EQ(sup_->appended_passes(), 50);
  EXPECT_EQ(Stored(waiting[49].id()).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(Stored(waiting[49].id()).message(), Stored(waiting[0].id()).message());
  EXPECT_THAT(Stored(waiting[49].id()).message(), HasSubstr("waiting for 2 free CPU slots"));
  AddNode("n2", 2);  // new slots: a full pass places the oldest waiting job
  Schedule();
  EXPECT_EQ(sup_->full_passes(), full + 1);
  EXPECT_EQ(Stored(waiting[0].id()).state(), v1::JOB_STATE_QUEUED);  // "second" goes first
  EXPECT_EQ(sup_->queue_size(), 50u);
}

TEST_F(SupervisorTest, ALostNodeFailsItsRuns) {
  AddNode("n1", 2);
  const v1::Job job = Submit("lost", 0);
  StartRunning(job);
  v1::Node node = *store_->GetNode("n1");
  node.set_state(v1::NODE_STATE_LOST);
  ASSERT_TRUE(store_->PutNode(node, {}).ok());
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->OnNodeLost("n1", &events).ok());
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(Stored(job.id()).message(),
              HasSubstr("node n1 was lost (no heartbeat) with ranks 0, 1"));
  EXPECT_EQ(sup_->scheduler().used_slots(), 0);  // nothing to wait for on a lost node
}

TEST_F(SupervisorTest, ASecondJobWaitsWholeUntilTheFirstEnds) {
  AddNode("n1", 2);
  AddNode("n2", 1);  // 3 slots, but a job's 2 ranks form one tensor-parallel group
  const v1::Job first = Submit("first");
  const v1::Job second = Submit("second");
  Schedule();
  EXPECT_EQ(Stored(first.id()).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Stored(second.id()).state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(Stored(second.id()).message(), HasSubstr("waiting"));
  EXPECT_EQ(sup_->scheduler().free_slots(), 1);  // nothing partial on n2
  EXPECT_TRUE(Beat("n2").empty());
  Beat("n1", {Status(first, 1, 0, false), Status(first, 1, 1, false)});
  EXPECT_EQ(Stored(first.id()).state(), v1::JOB_STATE_SUCCEEDED);
  Schedule();
  EXPECT_EQ(Stored(second.id()).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_GT(Run(second.id(), 1).queue_wait_seconds(), 0);
}

TEST_F(SupervisorTest, AJobLargerThanTheClusterIsRefused) {
  AddNode("n1", 1);
  v1::SubmitJobRequest req;
  req.set_spec_text(Spec("big", 0));
  absl::StatusOr<v1::JobSpec> spec = jobs_->ValidateSubmission(req);
  ASSERT_TRUE(spec.ok());
  absl::Status s = sup_->CheckAdmission(*spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("the job can never fit this cluster: needs 2"));
  // Slots, not memory, keep it out (the node reports none): no memory breakdown.
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("memory estimate")));
}

TEST_F(SupervisorTest, OnlyTheNewestCompleteCheckpointsAreKept) {
  AddNode("n1", 2);
  const v1::Job job = Submit("gc");
  StartRunning(job);
  ASSERT_TRUE(Shard(job, 1, 0, 3).ok());  // never completed: superseded later
  for (int step : {5, 10, 15}) {
    ASSERT_TRUE(Shard(job, 1, 0, step).ok());
    ASSERT_TRUE(Shard(job, 1, 1, step).ok());
  }
  const std::vector<v1::Checkpoint> left = store_->ListCheckpoints(job.id());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].step(), 10);
  EXPECT_EQ(left[1].step(), 15);
  const std::string dir = Run(job.id(), 1).checkpoint_dir();
  EXPECT_EQ(sup_->checkpoints().TakeDeletions(),
            (std::vector<std::string>{dir + "/step-3", dir + "/step-5"}));
  int deleted = 0;
  for (const v1::Event& e : Events(job.id())) deleted += e.to_state() == "DELETED";
  EXPECT_EQ(deleted, 2);

  v1::ReportCheckpointRequest bad;
  bad.set_job_id(job.id());
  bad.set_attempt(1);
  bad.set_step(20);
  bad.set_world_size(2);
  bad.set_path("/etc/step-20");
  bad.mutable_shard()->set_file("rank-0.safetensors");
  v1::ReportCheckpointResponse resp;
  std::vector<v1::Event> events;
  absl::Status s = sup_->OnCheckpointShard(bad, &resp, &events);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is not inside the run's checkpoint directory"));
  // Resolved before comparing (common/path_inside: links too): ".." out, or the directory
  // itself, which keep-latest would delete whole.
  for (const std::string& path : {dir + "/../../x/step-20", dir, dir + "/."}) {
    bad.set_path(path);
    s = sup_->OnCheckpointShard(bad, &resp, &events);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path;
  }
}

TEST_F(SupervisorTest, ACorruptCheckpointIsSkippedWithoutUsingARestart) {
  AddNode("n1", 2);
  const v1::Job job = Submit("corrupt", 1);
  StartRunning(job);
  for (int step : {5, 10}) {
    ASSERT_TRUE(Shard(job, 1, 0, step).ok());
    ASSERT_TRUE(Shard(job, 1, 1, step).ok());
  }
  const std::vector<v1::Checkpoint> ckpts = store_->ListCheckpoints(job.id());
  Beat("n1", {Status(job, 1, 0, false, 1), Status(job, 1, 1, false, 1)});
  ASSERT_EQ(Run(job.id(), 2).resume_checkpoint_id(), ckpts[1].id());
  StartRunning(job, 2);

  v1::RejectCheckpointRequest reject;
  reject.set_job_id(job.id());
  reject.set_attempt(2);
  reject.set_checkpoint_id(ckpts[1].id());
  reject.set_rank(1);
  reject.set_reason("rank-00001.safetensors: checksum mismatch");
  std::vector<v1::Event> events;
  ASSERT_TRUE(sup_->OnCheckpointRejected(reject, &events).ok());
  const v1::Job stored = Stored(job.id());
  EXPECT_EQ(stored.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(stored.restart_count(), 1);  // unchanged by the retry
  EXPECT_EQ(stored.current_attempt(), 3);
  EXPECT_EQ(Run(job.id(), 3).resume_checkpoint_id(), ckpts[0].id());
  EXPECT_EQ(store_->ListCheckpoints(job.id())[1].state(), v1::CHECKPOINT_STATE_CORRUPT);
  EXPECT_EQ(store_->ListCheckpoints(job.id())[1].reason(),
            "rank 1: rank-00001.safetensors: checksum mismatch");
}

TEST_F(SupervisorTest, ARestartedSupervisorKnowsThePlacedRuns) {
  AddNode("n1", 2);
  const v1::Job job = Submit("recover");
  const v1::Job queued = Submit("queued");
  StartRunning(job);
  sup_ = std::make_unique<Supervisor>(*store_, clock_, SupervisorOptions{kRoot});
  ASSERT_TRUE(sup_->Recover().ok());
  EXPECT_EQ(sup_->queue_size(), 1u);
  EXPECT_EQ(sup_->scheduler().used_slots(), 2);
  const std::vector<v1::RankLaunch> wanted =
      Beat("n1", {Status(job, 1, 0, true), Status(job, 1, 1, true)});
  ASSERT_EQ(wanted.size(), 2u);
  EXPECT_EQ(wanted[0].job_id(), job.id());
  ASSERT_TRUE(Progress(job, 1, 0, 2).ok());
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_RUNNING);
  Schedule();
  EXPECT_EQ(Stored(queued.id()).state(), v1::JOB_STATE_QUEUED);
}

}  // namespace
}  // namespace dhp::controller
