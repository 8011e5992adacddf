// JobManager::Resume on a new layout (issue 15 §2): the layout fields of ResumeJobRequest change
// the stored spec, validated as a submit and admitted against the cluster; a whole-share
// micro-batch follows a new dp; what cannot work (the spec's rules, the cluster, a vision-TP
// degree the ranks cannot reshard) is refused naming the field, and nothing stored changes.
#include <functional>
#include <string>
#include <vector>

#include "controller/job_manager.h"
#include "controller/job_manager_test_fixture.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::google::protobuf::util::MessageDifferencer;

TEST_F(JobManagerTest, ResumeOnANewLayoutStoresTheSpecAndNamesBothLayouts) {
  const v1::Job job = SubmitText(BatchedSpecYaml("relayout"));
  ASSERT_TRUE(Cancel(job.id()).ok());
  const v1::Checkpoint ckpt = AddCompleteCheckpoint(job.id(), 50, 2);

  v1::ResumeJobRequest req;
  req.set_vision_degree(4);
  req.set_text_degree(4);
  req.set_data_parallel_size(2);
  req.set_placement(v1::PLACEMENT_SEPARATE);
  v1::ResumeJobResponse resp;
  std::vector<v1::Event> events;
  absl::Status s = ResumeWith(job.id(), req, &resp, &events);
  ASSERT_TRUE(s.ok()) << s;

  v1::JobSpec expected = job.spec();
  expected.mutable_vision()->set_degree(4);
  expected.mutable_text()->set_degree(4);
  expected.set_data_parallel_size(2);
  expected.set_placement(v1::PLACEMENT_SEPARATE);
  const v1::Job stored = Stored(job.id());
  EXPECT_TRUE(MessageDifferencer::Equals(stored.spec(), expected))
      << stored.spec().DebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(stored, resp.job()));
  ASSERT_EQ(admitted_.size(), 1u);  // the cluster was asked about the new spec
  EXPECT_TRUE(MessageDifferencer::Equals(admitted_[0], expected));

  const std::string reason =
      "resumed by user from checkpoint " + std::to_string(ckpt.id()) +
      " at step 50 on layout vision 4 (sp) x text 4 x dp 2, separate (was vision 2 (sp) x "
      "text 2 x dp 1, collocated)";
  EXPECT_EQ(stored.message(), reason);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(Row(events[0]), EventRow("job.state", "CANCELLED", "QUEUED", reason, 2));
  EXPECT_EQ(resp.run().resume_checkpoint_id(), ckpt.id());  // written by 2 ranks, read by 16
  EXPECT_EQ(resp.run().start_step(), 50);
  const std::vector<v1::Run> runs = store_->ListRuns(job.id());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_TRUE(MessageDifferencer::Equals(runs[1], resp.run()));

  // A later resume without layout fields keeps the new layout and says nothing about it.
  ASSERT_TRUE(Cancel(job.id()).ok());
  ASSERT_TRUE(ResumeWith(job.id(), v1::ResumeJobRequest(), &resp).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()).spec(), expected));
  EXPECT_EQ(resp.job().message(), "resumed by user from checkpoint " +
                                      std::to_string(ckpt.id()) + " at step 50");
  EXPECT_EQ(admitted_.size(), 1u);
}

// A job that never chose a micro-batch stored the whole share (4 of 4 samples at dp 1); on a new
// dp it keeps training without accumulation, as the same spec submitted with that dp would.
TEST_F(JobManagerTest, ANewDpKeepsAWholeShareMicroBatchWhole) {
  const v1::Job job = SubmitText(BatchedSpecYaml("whole-share", 0));
  ASSERT_EQ(job.spec().training().micro_batch_size(), 4);
  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::ResumeJobRequest req;
  req.set_data_parallel_size(2);
  v1::ResumeJobResponse resp;
  absl::Status s = ResumeWith(job.id(), req, &resp);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Stored(job.id()).spec().training().micro_batch_size(), 2);
  EXPECT_EQ(Stored(job.id()).spec().data_parallel_size(), 2);
  EXPECT_EQ(resp.job().message(),
            "resumed by user from the start (no complete checkpoint) on layout vision 2 (sp) x "
            "text 2 x dp 2, collocated (was vision 2 (sp) x text 2 x dp 1, collocated), "
            "training.micro_batch_size 2 (was 4)");

  ASSERT_TRUE(Cancel(job.id()).ok());
  req.set_data_parallel_size(4);
  ASSERT_TRUE(ResumeWith(job.id(), req, &resp).ok());
  EXPECT_EQ(Stored(job.id()).spec().training().micro_batch_size(), 1);
  ASSERT_TRUE(Cancel(job.id()).ok());
  req.set_data_parallel_size(1);  // and back: the whole batch again
  ASSERT_TRUE(ResumeWith(job.id(), req, &resp).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()).spec(), job.spec()));
}

TEST_F(JobManagerTest, ResumeOnTheSameLayoutKeepsTheSpecAndAsksNoAdmission) {
  const v1::Job job = Submit("same-layout");
  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::ResumeJobRequest req;
  req.set_vision_degree(2);
  req.set_placement(v1::PLACEMENT_COLLOCATE);
  v1::ResumeJobResponse resp;
  ASSERT_TRUE(ResumeWith(job.id(), req, &resp).ok());
  EXPECT_EQ(resp.job().message(), "resumed by user from the start (no complete checkpoint)");
  EXPECT_TRUE(MessageDifferencer::Equals(Stored(job.id()).spec(), job.spec()));
  EXPECT_TRUE(admitted_.empty());
}

// A layout that cannot work is INVALID_ARGUMENT naming the request's field, the value and the
// spec rule it breaks; nothing is written (job, runs, checkpoints and events stay as stored).
TEST_F(JobManagerTest, AnInvalidLayoutIsRefusedNamingTheFieldAndChangesNothing) {
  const v1::Job job = SubmitText(BatchedSpecYaml("bad-layout"));
  ASSERT_TRUE(Cancel(job.id()).ok());
  AddCompleteCheckpoint(job.id(), 50, 4);
  const std::vector<std::string> before = Snapshot(job.id());
  const int32_t kMax = 2147483647;
  struct Case {
    std::function<void(v1::ResumeJobRequest&)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::ResumeJobRequest& r) { r.set_text_degree(3); },
       "resume: text_degree 3: text.degree: 3 does not divide the 4 attention heads of tiny; "
       "text.degree: 3 does not divide the 2 KV heads of tiny and is not a multiple of them; "
       "text.degree: 3 does not divide the 128 MLP width (intermediate_size) of tiny"},
      {[](v1::ResumeJobRequest& r) { r.set_data_parallel_size(4); },
       "resume: data_parallel_size 4: training.micro_batch_size: 2 does not divide the 1 samples "
       "per data-parallel replica (training.batch_size 4 / data_parallel_size 4); use a divisor "
       "of 1"},
      {[](v1::ResumeJobRequest& r) { r.set_data_parallel_size(3); },
       "resume: data_parallel_size 3: training.batch_size: 4 is not divisible by "
       "data_parallel_size 3"},
      {[](v1::ResumeJobRequest& r) { r.set_vision_degree(0); },
       "resume: vision_degree 0: vision.degree: 0 must be at least 1"},
      {[](v1::ResumeJobRequest& r) { r.set_text_degree(-2); },
       "resume: text_degree -2: text.degree: -2 must be at least 1"},
      {[](v1::ResumeJobRequest& r) { r.set_data_parallel_size(-1); },
       "resume: data_parallel_size -1: data_parallel_size: -1 must be at least 1"},
      {[&](v1::ResumeJobRequest& r) { r.set_vision_degree(kMax); },
       "resume: vision_degree 2147483647: vision.degree: 2147483647 does not divide the 4 "
       "attention heads of the tiny vision encoder; vision.degree: 2147483647 is over the limit "
       "of 1024"},
      {[&](v1::ResumeJobRequest& r) {
         r.set_vision_degree(kMax);
         r.set_data_parallel_size(kMax);
       },
       "resume: vision_degree 2147483647, data_parallel_size 2147483647: vision.degree: "
       "2147483647 does not divide the 4 attention heads of the tiny vision encoder; "
       "training.batch_size: 4 is not divisible by data_parallel_size 2147483647; "
       "vision.degree: 2147483647 is over the limit of 1024; data_parallel_size: 2147483647 is "
       "over the limit of 4096"},
      {[](v1::ResumeJobRequest& r) { r.set_placement(static_cast<v1::Placement>(7)); },
       "resume: placement 7: not a placement; use one of collocate, separate"},
  };
  for (const Case& c : cases) {
    v1::ResumeJobRequest req;
    c.set(req);
    v1::ResumeJobResponse resp;
    absl::Status s = ResumeWith(job.id(), req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(Snapshot(job.id()), before) << c.message;
  }
  EXPECT_TRUE(admitted_.empty());  // refused before the cluster is asked
}

// The vision TP baseline's ZeRO-1 state holds flattened TP shards, so the ranks cannot reshard
// a change of its degree (comm::CheckReshardable): with a checkpoint to resume from, the resume
// is refused up front; without one, a fresh start on any degree is fine.
TEST_F(JobManagerTest, AVisionTensorParallelDegreeChangeIsRefusedWhenACheckpointMustBeResharded) {
  std::string yaml = SpecYaml("vision-tp");
  yaml.replace(yaml.find("parallelism: sequence"), 21, "parallelism: tensor");
  const v1::Job job = SubmitText(yaml);
  ASSERT_TRUE(Cancel(job.id()).ok());
  v1::ResumeJobRequest req;
  req.set_vision_degree(4);
  req.set_text_degree(1);
  AddCompleteCheckpoint(job.id(), 50, 2);
  const std::vector<std::string> before = Snapshot(job.id());
  v1::ResumeJobResponse resp;
  absl::Status s = ResumeWith(job.id(), req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "resume: vision_degree 4, text_degree 1: a checkpoint of layout \"vision 2 (tp) x "
            "text 2 x dp 1, collocated\" cannot resume under \"vision 4 (tp) x text 1 x dp 1, "
            "collocated\": the vision tensor-parallel baseline keeps its ZeRO-1 state as "
            "flattened TP shards, so its vision degree and strategy must stay (Ulysses SP degree, "
            "text TP degree, data parallelism and placement may change)");
  EXPECT_EQ(Snapshot(job.id()), before);
  EXPECT_TRUE(admitted_.empty());
  req.clear_vision_degree();  // the text degree alone can change
  ASSERT_TRUE(ResumeWith(job.id(), req, &resp).ok());
  EXPECT_EQ(Stored(job.id()).spec().text().degree(), 1);
}

TEST_F(JobManagerTest, ALayoutTheClusterRefusesChangesNothing) {
  const v1::Job job = SubmitText(BatchedSpecYaml("too-big"));
  ASSERT_TRUE(Cancel(job.id()).ok());
  const std::vector<std::string> before = Snapshot(job.id());
  admission_ = absl::FailedPreconditionError("the job can never fit this cluster: 8 ranks");
  v1::ResumeJobRequest req;
  req.set_data_parallel_size(2);
  req.set_vision_degree(4);
  v1::ResumeJobResponse resp;
  absl::Status s = ResumeWith(job.id(), req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "resume: vision_degree 4, data_parallel_size 2: the job can never fit "
                         "this cluster: 8 ranks");
  ASSERT_EQ(admitted_.size(), 1u);
  EXPECT_EQ(admitted_[0].vision().degree(), 4);
  EXPECT_EQ(admitted_[0].data_parallel_size(), 2);
  EXPECT_EQ(Snapshot(job.id()), before);
}

}  // namespace
}  // namespace dhp::controller
