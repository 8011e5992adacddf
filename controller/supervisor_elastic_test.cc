// Elastic jobs in the Supervisor: an attempt placed on a smaller layout within the spec's
// `elastic` bounds stores that layout in the job's spec, and a later attempt grows back.
#include <string>
#include <vector>

#include "common/job_layout.h"
#include "controller/supervisor_test_util.h"

namespace dhp::controller {
namespace {

// Tiny model, vision SP 2 x text TP 2 collocated x dp 2 (4 ranks, two TP groups of 2), which
// may shrink to dp 1.
std::string ElasticSpec(const std::string& name) {
  return "name: " + name + "\nmodel: {preset: tiny}\n"
         "vision: {parallelism: sequence, degree: 2}\ntext: {parallelism: tensor, degree: 2}\n"
         "data_parallel_size: 2\nelastic: {data_parallel_size: {min: 1}}\n"
         "training: {max_steps: 10}\ncheckpoint: {every_steps: 5}\n"
         "restart: {max_restarts: 2, stall_timeout_s: 30}\n"
         "data: {datasets: [shapes], registry: {shapes: {annotation_path: data/train.jsonl}}}\n";
}

class SupervisorElasticTest : public SupervisorTest {
 protected:
  std::string Layout(const std::string& id) {
    return LayoutForSpec(Stored(id).spec()).DebugString();
  }
};

// The demand admission computed, taken at submit, equals the one computed from the stored job
// (as a requeue does), alternatives included.
TEST_F(SupervisorElasticTest, TheAdmittedDemandEqualsTheOneComputedFromTheStoredJob) {
  AddNode("n1", 2);
  const v1::Job job = SubmitText(ElasticSpec("elastic"));
  const RunId id{job.id(), 1};
  ASSERT_NE(sup_->queued_demand(id), nullptr);
  const JobDemand admitted = *sup_->queued_demand(id);
  sup_->OnJobQueued(Stored(job.id()));  // computed again, replacing it
  const JobDemand computed = *sup_->queued_demand(id);
  ASSERT_EQ(admitted.alternatives.size(), 1u);  // dp 2, then dp 1
  ASSERT_EQ(computed.alternatives.size(), 1u);
  const auto same = [](const JobDemand& a, const JobDemand& b) {
    EXPECT_EQ(a.job_id, b.job_id);
    EXPECT_EQ(a.priority, b.priority);
    EXPECT_EQ(a.submit_seq, b.submit_seq);
    EXPECT_EQ(a.world_size, b.world_size);
    EXPECT_EQ(a.same_node_groups, b.same_node_groups);
    EXPECT_EQ(a.memory_bytes_per_rank, b.memory_bytes_per_rank);
    EXPECT_EQ(a.cpu_memory_bytes_per_rank, b.cpu_memory_bytes_per_rank);
  };
  same(admitted, computed);
  same(admitted.alternatives[0], computed.alternatives[0]);
  EXPECT_EQ(admitted.job_id, id.Key());
  EXPECT_EQ(admitted.submit_seq, job.submit_seq());
  EXPECT_EQ(admitted.alternatives[0].job_id, id.Key());
  EXPECT_EQ(admitted.world_size, 4);
  EXPECT_EQ(admitted.alternatives[0].world_size, 2);
}

TEST_F(SupervisorElasticTest, AnAttemptRunsOnTheLargestLayoutThatFitsAndGrowsBackLater) {
  AddNode("n1", 2);  // room for dp 1 only; dp 2 needs 4 slots
  const v1::Job job = SubmitText(ElasticSpec("elastic"));
  EXPECT_EQ(job.spec().elastic().data_parallel_size().max(), 2);  // filled in at submit
  Schedule();
  const v1::Job placed = Stored(job.id());
  ASSERT_EQ(placed.state(), v1::JOB_STATE_SCHEDULED) << placed.message();
  EXPECT_EQ(placed.spec().data_parallel_size(), 1);
  EXPECT_EQ(Layout(job.id()), "vision 2 (sp) x text 2 x dp 1, collocated");
  EXPECT_NE(placed.message().find("on layout vision 2 (sp) x text 2 x dp 1, collocated (was "
                                  "vision 2 (sp) x text 2 x dp 2, collocated), training."
                                  "micro_batch_size 2 (was 1), within its elastic bounds"),
            std::string::npos)
      << placed.message();
  EXPECT_EQ(placed.spec().elastic().data_parallel_size().min(), 1);  // the bounds stay
  EXPECT_EQ(placed.spec().elastic().data_parallel_size().max(), 2);
  EXPECT_EQ(Run(job.id(), 1).world_size(), 2);

  // The attempt's ranks run, then fail; meanwhile a second node joins.
  ASSERT_EQ(Beat("n1").size(), 2u);
  Beat("n1", {Status(job, 1, 0, true), Status(job, 1, 1, true)});
  AddNode("n2", 2);
  Beat("n1", {Status(job, 1, 0, false, 1), Status(job, 1, 1, false, 1)});
  ASSERT_EQ(Stored(job.id()).state(), v1::JOB_STATE_QUEUED) << Stored(job.id()).message();
  Schedule();
  const v1::Job grown = Stored(job.id());
  ASSERT_EQ(grown.state(), v1::JOB_STATE_SCHEDULED) << grown.message();
  EXPECT_EQ(grown.current_attempt(), 2);
  EXPECT_EQ(Layout(job.id()), "vision 2 (sp) x text 2 x dp 2, collocated");
  EXPECT_EQ(grown.spec().training().micro_batch_size(), 1);
  EXPECT_EQ(Run(job.id(), 2).world_size(), 4);
  EXPECT_EQ(Beat("n1").size() + Beat("n2").size(), 4u);
}

TEST_F(SupervisorElasticTest, AJobWhoseOwnLayoutNeverFitsIsAdmittedWhenASmallerOneDoes) {
  AddNode("n1", 2);
  v1::SubmitJobRequest req;
  std::string pinned = ElasticSpec("pinned");
  pinned.replace(pinned.find("elastic: {data_parallel_size: {min: 1}}\n"),
                 std::string("elastic: {data_parallel_size: {min: 1}}\n").size(), "");
  req.set_spec_text(pinned);
  absl::StatusOr<v1::JobSpec> spec = jobs_->ValidateSubmission(req);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const absl::Status refused = sup_->CheckAdmission(*spec);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  // With the elastic bound the same job is admitted (SubmitText checks it) and runs on dp 1.
  const v1::Job job = SubmitText(ElasticSpec("elastic"));
  Schedule();
  EXPECT_EQ(Stored(job.id()).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Stored(job.id()).spec().data_parallel_size(), 1);
}

TEST_F(SupervisorElasticTest, AnElasticJobThatFitsWholeKeepsItsSpec) {
  AddNode("n1", 2);
  AddNode("n2", 2);
  const v1::Job job = SubmitText(ElasticSpec("elastic"));
  Schedule();
  const v1::Job placed = Stored(job.id());
  ASSERT_EQ(placed.state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(placed.spec().SerializeAsString(), job.spec().SerializeAsString());
  EXPECT_EQ(placed.message().find("elastic"), std::string::npos) << placed.message();
}

}  // namespace
}  // namespace dhp::controller
