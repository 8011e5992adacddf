#include "api/dhpctl/output.h"

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

}  // namespace
}  // namespace dhp::dhpctl
