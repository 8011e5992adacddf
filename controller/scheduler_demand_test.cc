// Tests DemandForSpec (scheduler_demand.cc): world size and same-node groups of real specs under
// each placement, the memory planner's per-rank memory on GPU slots (CPU slots unchecked), and
// how memory per slot kind decides placement and reasons.
#include <string>
#include <vector>

#include "common/memory_plan.h"
#include "common/model_presets.h"
#include "controller/scheduler.h"
#include "controller/scheduler_test_util.h"
#include "dhp/v1/job_spec.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using namespace test;  // NOLINT: the helpers are the tests' vocabulary

v1::JobSpec Spec(int vision_degree, v1::Parallelism vision, int text_degree, int dp,
                 v1::Placement placement) {
  v1::JobSpec spec;
  spec.set_priority(3);
  spec.mutable_vision()->set_parallelism(vision);
  spec.mutable_vision()->set_degree(vision_degree);
  spec.mutable_text()->set_parallelism(text_degree > 1 ? v1::PARALLELISM_TENSOR
                                                       : v1::PARALLELISM_NONE);
  spec.mutable_text()->set_degree(text_degree);
  spec.set_data_parallel_size(dp);
  spec.set_placement(placement);
  return spec;
}

using Groups = std::vector<std::vector<int>>;

TEST(SchedulerTest, DemandForSpecCollocateVsSeparate) {
  const auto seq = v1::PARALLELISM_SEQUENCE;
  const auto tp = v1::PARALLELISM_TENSOR;
  // Collocated: vision rank i and text rank i share a process; text.tp0 = {0, 1}.
  JobDemand d = DemandForSpec("j-1", Spec(2, seq, 2, 1, v1::PLACEMENT_COLLOCATE), 7);
  EXPECT_EQ(d.job_id, "j-1");
  EXPECT_EQ(d.priority, 3);
  EXPECT_EQ(d.submit_seq, 7);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.same_node_groups, (Groups{{0, 1}}));
  // Separate: vision ranks 0, 1 (Ulysses: not forced together), text ranks 2, 3.
  d = DemandForSpec("j", Spec(2, seq, 2, 1, v1::PLACEMENT_SEPARATE), 0);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.same_node_groups, (Groups{{0}, {1}, {2, 3}}));
  // dp 2: one text TP group per replica.
  d = DemandForSpec("j", Spec(2, seq, 2, 2, v1::PLACEMENT_COLLOCATE), 0);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.same_node_groups, (Groups{{0, 1}, {2, 3}}));
  d = DemandForSpec("j", Spec(2, seq, 2, 2, v1::PLACEMENT_SEPARATE), 0);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.same_node_groups, (Groups{{0}, {1}, {2}, {3}, {4, 5}, {6, 7}}));
  // Vision tensor parallelism: vision.tp<d> groups are same-node groups too.
  d = DemandForSpec("j", Spec(2, tp, 2, 1, v1::PLACEMENT_SEPARATE), 0);
  EXPECT_EQ(d.same_node_groups, (Groups{{0, 1}, {2, 3}}));
  // Collocated with unequal degrees: the text group of 2 inside a world of 4.
  d = DemandForSpec("j", Spec(4, seq, 2, 1, v1::PLACEMENT_COLLOCATE), 0);
  EXPECT_EQ(d.world_size, 4);
  EXPECT_EQ(d.same_node_groups, (Groups{{0, 1}, {2}, {3}}));
  // Overlapping groups merge: vision.tp0 = {0..3} and text.tp0 = {0, 1}, per replica.
  d = DemandForSpec("j", Spec(4, tp, 2, 2, v1::PLACEMENT_COLLOCATE), 0);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.same_node_groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // Defaults (no degrees): one rank.
  d = DemandForSpec("j", v1::JobSpec(), 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.same_node_groups, (Groups{{0}}));
}

TEST(SchedulerTest, DemandForSpecCarriesThePlannersMemoryPerSlotKind) {
  v1::JobSpec spec = Spec(2, v1::PARALLELISM_SEQUENCE, 2, 1, v1::PLACEMENT_COLLOCATE);
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_vision()->set_dtype(v1::DTYPE_FP32);
  spec.mutable_text()->set_dtype(v1::DTYPE_FP32);
  spec.mutable_data()->set_max_seq_len(1024);
  spec.mutable_data()->set_max_pixels(50176);
  JobDemand d = DemandForSpec("j", spec, 0);
  const ModelPreset& tiny = *FindModelPreset("tiny");
  EXPECT_EQ(d.memory_bytes_per_rank, PlanMemory(spec, tiny, PlanDevice::kGpu)->PeakBytes());
  EXPECT_GT(d.memory_bytes_per_rank, kGiB);  // the 1 GiB CUDA runtime and more
  EXPECT_LT(d.memory_bytes_per_rank, 2 * kGiB);
  // CPU slots are not checked, even where the CPU bound is large: the defaults' 12.8 Mpixel
  // image materialises over 8 GiB of attention scores in the CPU plan.
  EXPECT_EQ(d.cpu_memory_bytes_per_rank, 0);
  spec.mutable_data()->set_max_seq_len(8192);
  spec.mutable_data()->set_max_pixels(12845056);
  EXPECT_GT(PlanMemory(spec, tiny, PlanDevice::kCpu)->PeakBytes(), 8 * kGiB);
  EXPECT_EQ(DemandForSpec("j", spec, 0).cpu_memory_bytes_per_rank, 0);
  // A model directory alone: the controller cannot know the architecture; nothing is checked.
  spec.mutable_model()->set_preset("");
  spec.mutable_model()->set_weights_path("hf-model");
  d = DemandForSpec("j", spec, 0);
  EXPECT_EQ(d.memory_bytes_per_rank, 0);
  EXPECT_EQ(d.cpu_memory_bytes_per_rank, 0);
  EXPECT_FALSE(MemoryPlanForSpec(spec, PlanDevice::kGpu).has_value());
}

TEST(SchedulerTest, MemoryPerRankDependsOnTheSlotKind) {
  Scheduler s;
  s.UpsertNode(Gpu("g", 4, 24 * kGiB));
  s.UpsertNode(Cpu("c", 4, 2 * kGiB));
  JobDemand j = Job("j", 2, {{0, 1}}, 0, 1, 40 * kGiB);
  j.cpu_memory_bytes_per_rank = kGiB;  // fits the CPU slots, not the GPUs
  EXPECT_TRUE(s.CheckFeasible(j).ok());
  EXPECT_TRUE(s.MemoryExcludesNodes(j));  // the GPU node
  EXPECT_FALSE(s.MemoryExcludesNodes(Job("small", 2, {}, 0, 0, kGiB)));
  EXPECT_FALSE(s.MemoryExcludesNodes(Job("bad", 0)));
  ScheduleResult r = s.Schedule({j});
  EXPECT_THAT(PlacementOf(r, "j"), ElementsAre(C("c", 0), C("c", 1)));
  j.job_id = "k";
  j.cpu_memory_bytes_per_rank = 3 * kGiB;
  absl::Status st = s.CheckFeasible(j);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "needs 40.0 GiB per rank on a GPU and 3.0 GiB on a CPU slot; the largest GPU has "
            "24.0 GiB and the largest CPU slot 2.0 GiB");
  // 0 on CPU slots: not checked there.
  j.cpu_memory_bytes_per_rank = 0;
  EXPECT_TRUE(s.CheckFeasible(j).ok());
  r = s.Schedule({j});
  EXPECT_THAT(PlacementOf(r, "k"), ElementsAre(C("c", 2), C("c", 3)));
  // Waiting reasons name the memory of the kind they wait for.
  j.job_id = "m";
  j.cpu_memory_bytes_per_rank = kGiB;
  r = s.Schedule({j});
  EXPECT_THAT(r.waiting,
              ElementsAre(Pair("m",
                               "waiting for 2 free CPU slots with a tensor-parallel group of 2 on "
                               "one node, 1.0 GiB per rank (cluster has 0 free with enough "
                               "memory); holds a reservation of 2 CPU slots on 1 node (0 free "
                               "now) until job j finishes")));
}


}  // namespace
}  // namespace dhp::controller
