#include "api/dhpctl/output.h"

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace dhp::dhpctl {
namespace {

constexpr int64_t kNow = 1'800'000'000'000'000;

TEST(OutputTest, TableAlignsColumns) {
  EXPECT_EQ(RenderTable({"ID", "STATE"}, {{"j-1", "QUEUED"}, {"j-22222", "RUNNING"}}),
            "ID       STATE\n"
            "j-1      QUEUED\n"
            "j-22222  RUNNING\n");
}

TEST(OutputTest, AgeUnits) {
  EXPECT_EQ(Age(0, kNow), "-");
  EXPECT_EQ(Age(kNow - 5'000'000, kNow), "5s");
  EXPECT_EQ(Age(kNow - 600'000'000, kNow), "10m");
  EXPECT_EQ(Age(kNow - 3LL * 3600'000'000, kNow), "3h");
  EXPECT_EQ(Age(kNow - 3LL * 86400'000'000, kNow), "3d");
}

TEST(OutputTest, LayoutSummary) {
  v1::JobSpec spec;
  spec.mutable_vision()->set_parallelism(v1::PARALLELISM_SEQUENCE);
  spec.mutable_vision()->set_degree(4);
  spec.mutable_vision()->set_zero_stage(1);
  spec.mutable_text()->set_parallelism(v1::PARALLELISM_TENSOR);
  spec.mutable_text()->set_degree(2);
  spec.set_data_parallel_size(2);
  spec.set_placement(v1::PLACEMENT_COLLOCATE);
  EXPECT_EQ(LayoutSummary(spec), "vision sequence x4 (zero-1), text tensor x2, dp 2, collocate");
}

TEST(OutputTest, JobsTableRow) {
  v1::Job job;
  job.set_id("j-abc");
  job.mutable_spec()->set_name("demo");
  job.mutable_spec()->mutable_model()->set_preset("tiny");
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_current_attempt(2);
  job.set_latest_step(40);
  job.set_latest_loss(1.25);
  job.mutable_create_time()->set_seconds(kNow / 1000000 - 90);
  EXPECT_EQ(JobsTable({job}, kNow),
            "ID     NAME  STATE    ATTEMPT  STEP  LOSS  PRESET  AGE\n"
            "j-abc  demo  RUNNING  2        40    1.25  tiny    90s\n");
}

TEST(OutputTest, EventLineShowsTransitionAndReason) {
  v1::Event e;
  e.set_id(7);
  e.set_job_id("j-abc");
  e.set_type("job.state");
  e.set_from_state("QUEUED");
  e.set_to_state("CANCELLED");
  e.set_reason("cancelled by user");
  e.mutable_time()->set_seconds(1'800'000'000);
  EXPECT_EQ(EventLine(e),
            "2027-01-15T08:00:00Z  #7  j-abc  job.state  QUEUED -> CANCELLED  (cancelled by user)");
}

TEST(OutputTest, NodesTable) {
  v1::Node n;
  n.set_id("gpu-1");
  n.set_state(v1::NODE_STATE_LOST);
  n.set_address("10.0.0.5");
  n.mutable_resources()->set_cpu_slots(0);
  n.mutable_resources()->set_memory_bytes(2LL << 30);
  v1::Gpu* gpu = n.mutable_resources()->add_gpus();
  gpu->set_name("H100");
  n.mutable_last_heartbeat_time()->set_seconds(kNow / 1000000 - 30);
  EXPECT_EQ(NodesTable({n}, kNow),
            "NODE   STATE  GPUS      CPU_SLOTS  MEMORY   HEARTBEAT  ADDRESS\n"
            "gpu-1  LOST   1 x H100  0          2.0 GiB  30s ago    10.0.0.5\n");
}

TEST(OutputTest, ACordonedNodeAndWhatADrainAsked) {
  v1::Node n;
  n.set_id("cpu-1");
  n.set_state(v1::NODE_STATE_READY);
  n.set_cordoned(true);
  n.mutable_resources()->set_cpu_slots(4);
  n.mutable_last_heartbeat_time()->set_seconds(kNow / 1000000 - 1);
  EXPECT_EQ(NodesTable({n}, kNow),
            "NODE   STATE           GPUS  CPU_SLOTS  MEMORY  HEARTBEAT  ADDRESS\n"
            "cpu-1  READY,CORDONED  0     4          0 B     1s ago     \n");
  n.set_stopping(true);  // and its agent is shutting down
  EXPECT_EQ(NodesTable({n}, kNow),
            "NODE   STATE                    GPUS  CPU_SLOTS  MEMORY  HEARTBEAT  ADDRESS\n"
            "cpu-1  READY,CORDONED,STOPPING  0     4          0 B     1s ago     \n");
  n.set_stopping(false);
  v1::DrainNodeResponse resp;
  *resp.mutable_node() = n;
  EXPECT_EQ(DrainSummary(resp),
            "node cpu-1 cordoned: no new ranks are placed there; no running job had ranks "
            "there\n");
  resp.add_job_ids("j-1");
  resp.add_job_ids("j-2");
  EXPECT_EQ(DrainSummary(resp),
            "node cpu-1 cordoned: no new ranks are placed there; asked to checkpoint at their "
            "next step and stop (then queued again): j-1 j-2\n");
}


TEST(OutputTest, CheckpointsTableWithCorruptNote) {
  v1::GetJobResponse resp;
  EXPECT_EQ(CheckpointsTable(resp), "(none)\n");
  v1::Checkpoint* c = resp.add_checkpoints();
  c->set_id(3);
  c->set_step(40);
  c->set_state(v1::CHECKPOINT_STATE_COMPLETE);
  c->set_attempt(1);
  c->set_size_bytes(3LL << 20);
  c->set_world_size(2);
  c->add_shards()->set_rank(0);
  c->add_shards()->set_rank(1);
  c->set_write_seconds(1.25);
  c->mutable_create_time()->set_seconds(1'800'000'000);
  c->set_path("/ckpt/j-1/step-40");
  c = resp.add_checkpoints();
  c->set_id(4);
  c->set_step(80);
  c->set_state(v1::CHECKPOINT_STATE_CORRUPT);
  c->set_attempt(2);
  c->set_world_size(2);
  c->add_shards()->set_rank(1);
  c->set_path("/ckpt/j-1/step-80");
  c->set_reason("rank 1: crc32c mismatch");
  EXPECT_EQ(CheckpointsTable(resp),
            "ID  STEP  STATE     ATTEMPT  SIZE     SHARDS  WRITE_S  CREATED               PATH\n"
            "3   40    COMPLETE  1        3.0 MiB  2/2     1.2      2027-01-15T08:00:00Z  "
            "/ckpt/j-1/step-40\n"
            "4   80    CORRUPT   2        0 B      1/2     -        -                     "
            "/ckpt/j-1/step-80\n"
            "checkpoint 4 (step 80) is CORRUPT and is skipped on resume: rank 1: crc32c "
            "mismatch\n");
}

TEST(OutputTest, PlacementSummaryGroupsSlotsPerNode) {
  v1::Run run;
  EXPECT_EQ(PlacementSummary(run), "-");
  const std::vector<std::tuple<int, std::string, int>> ranks = {
      {4, "node-b", 0}, {0, "node-a", 0}, {1, "node-a", 1}, {2, "node-a", 2},
      {3, "node-a", 5}, {5, "node-b", 1}};
  for (const auto& [rank, node, slot] : ranks) {
    v1::RankPlacement* p = run.add_placement();
    p->set_world_rank(rank);
    p->set_node_id(node);
    p->set_slot(slot);
    p->set_gpu(true);
  }
  EXPECT_EQ(PlacementSummary(run), "node-a gpu 0-2,5, node-b gpu 0-1");
  run.mutable_placement(0)->set_gpu(false);
  EXPECT_EQ(PlacementSummary(run), "node-a gpu 0-2,5, node-b cpu 0, node-b gpu 1");
}

TEST(OutputTest, Seconds) {
  EXPECT_EQ(Seconds(0), "-");
  EXPECT_EQ(Seconds(0.42), "0.4s");
  EXPECT_EQ(Seconds(59.9), "59.9s");
  EXPECT_EQ(Seconds(65), "1:05");
  EXPECT_EQ(Seconds(3723), "1:02:03");
}

TEST(OutputTest, JobDetailShowsRunPlacementAndQueueWait) {
  v1::GetJobResponse resp;
  resp.mutable_job()->set_id("j-1");
  resp.mutable_job()->set_total_steps(200);
  resp.mutable_job()->set_latest_step(50);
  v1::Run* run = resp.add_runs();
  run->set_attempt(1);
  run->set_world_size(2);
  run->set_queue_wait_seconds(2.5);
  run->set_checkpoint_dir("/ckpt/j-1");
  for (int r = 0; r < 2; ++r) {
    v1::RankPlacement* p = run->add_placement();
    p->set_world_rank(r);
    p->set_node_id("n-1");
    p->set_slot(r);
  }
  const std::string detail = JobDetail(resp, kNow);
  EXPECT_NE(detail.find("Step:       50 of 200"), std::string::npos) << detail;
  EXPECT_NE(detail.find("WORLD  QUEUED"), std::string::npos) << detail;
  EXPECT_NE(detail.find("2      2.5s"), std::string::npos) << detail;
  EXPECT_NE(detail.find("Placement:  n-1 cpu 0-1 (attempt 1)\n"), std::string::npos) << detail;
  EXPECT_NE(detail.find("Ckpt dir:   /ckpt/j-1\n"), std::string::npos) << detail;
  EXPECT_NE(detail.find("Checkpoints:\n(none)\n"), std::string::npos) << detail;
}

}  // namespace
}  // namespace dhp::dhpctl
