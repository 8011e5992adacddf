// GPU models, and the spec's layout with its alternatives judged against a GPU: order, the
// layouts considered, and the reasons a layout does not fit.
#include "common/memory_fit.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "common/spec_test_util.h"

namespace dhp {
namespace {

v1::JobSpec Load(const std::string& path) { return LoadSpecFile(path); }

std::vector<LayoutFit> Fit(const std::string& path, const std::string& gpu, int per_node = 8) {
  const v1::JobSpec spec = Load(path);
  const GpuModel* g = FindGpuModel(gpu);
  EXPECT_NE(g, nullptr) << gpu;
  absl::StatusOr<std::vector<LayoutFit>> fits =
      FitLayouts(spec, *FindModelPreset(spec.model().preset()), {g->memory_bytes, per_node});
  EXPECT_TRUE(fits.ok()) << fits.status();
  return fits.ok() ? *fits : std::vector<LayoutFit>();
}

TEST(MemoryFitTest, GpuModelsByName) {
  std::vector<std::string> names;
  for (const GpuModel& g : GpuModels()) names.push_back(g.name);
  EXPECT_EQ(names, (std::vector<std::string>{"h100-80gb", "h200-141gb", "a100-40gb", "a100-80gb",
                                             "l40s-48gb"}));
  EXPECT_EQ(FindGpuModel("h100-80gb")->memory_bytes, int64_t{81559} << 20);  // nvidia-smi MiB
  EXPECT_EQ(FindGpuModel("H100"), nullptr);
  EXPECT_EQ(FindGpuModel(""), nullptr);
}

TEST(MemoryFitTest, SpecLayoutFirstThenAlternativesByPeakMemory) {
  const std::vector<LayoutFit> fits = Fit("configs/qwen2_5_vl_7b-sp4-tp4.yaml", "h100-80gb");
  ASSERT_GT(fits.size(), 10u);
  EXPECT_TRUE(fits[0].spec_layout);
  EXPECT_EQ(PlanLayoutText(fits[0].plan.layout),
            "vision sequence x4, text tensor x4, dp 2, collocate");
  EXPECT_TRUE(fits[0].fits) << fits[0].why_not;
  std::set<std::string> seen;
  for (size_t i = 0; i < fits.size(); ++i) {
    const comm::Layout& l = fits[i].plan.layout;
    SCOPED_TRACE(PlanLayoutText(l));
    EXPECT_EQ(l.WorldSize(), 8);         // the spec's GPUs
    EXPECT_EQ(32 % l.dp, 0);             // training.batch_size 32 divides by dp
    EXPECT_EQ(16 % l.vision_degree, 0);  // vision heads
    EXPECT_EQ(28 % l.text_degree, 0);    // text heads
    EXPECT_TRUE(seen.insert(PlanLayoutText(l)).second);
    EXPECT_EQ(fits[i].spec_layout, i == 0);
    EXPECT_EQ(fits[i].fits, fits[i].why_not.empty());
    if (i >= 2) {
      EXPECT_LE(fits[i - 1].plan.PeakBytes(), fits[i].plan.PeakBytes());
    }
  }
  // Both placements and both vision parallelisms are among them; text TP 4 x vision SP 4
  // separate needs the least.
  EXPECT_EQ(seen.count("vision sequence x4, text tensor x4, dp 1, separate"), 1u);
  EXPECT_EQ(seen.count("vision tensor x4, text tensor x4, dp 2, collocate"), 1u);
  EXPECT_EQ(seen.count("vision x1, text x1, dp 8, collocate"), 1u);
  EXPECT_EQ(seen.count("vision tensor x8, text tensor x4, dp 1, collocate"), 0u);  // 3420 % 8
}

TEST(MemoryFitTest, ReasonsALayoutDoesNotFit) {
  std::vector<LayoutFit> fits = Fit("configs/qwen2_5_vl_7b-sp4-tp4.yaml", "h100-80gb", 2);
  ASSERT_FALSE(fits.empty());
  EXPECT_FALSE(fits[0].fits);
  EXPECT_EQ(fits[0].why_not, "a tensor-parallel group of 4 ranks does not fit a node of 2 GPUs");
  fits = Fit("configs/qwen2_5_vl_7b-sp4-tp4.yaml", "a100-40gb");
  ASSERT_FALSE(fits.empty());
  EXPECT_FALSE(fits[0].fits);
  EXPECT_EQ(fits[0].why_not, "needs " + GiBText(fits[0].plan.PeakBytes()) + " GiB per GPU, has " +
                                 GiBText(int64_t{40960} << 20));
  // The larger GPU holds what the smaller does not.
  const std::vector<LayoutFit> h100 = Fit("configs/qwen2_5_vl_32b-sp8-tp8.yaml", "h100-80gb");
  const std::vector<LayoutFit> h200 = Fit("configs/qwen2_5_vl_32b-sp8-tp8.yaml", "h200-141gb");
  ASSERT_FALSE(h100.empty());
  ASSERT_FALSE(h200.empty());
  EXPECT_EQ(h100[0].plan.PeakBytes(), h200[0].plan.PeakBytes());
  EXPECT_TRUE(h200[0].fits);
}

TEST(MemoryFitTest, LargestSameNodeGroup) {
  comm::Layout l;
  l.vision_degree = 8;
  l.text_degree = 2;
  EXPECT_EQ(LargestSameNodeGroup(l), 2);  // Ulysses groups may span nodes
  l.vision_parallelism = comm::VisionParallelism::kTensor;
  EXPECT_EQ(LargestSameNodeGroup(l), 8);
  l.placement = comm::Placement::kSeparate;
  EXPECT_EQ(LargestSameNodeGroup(l), 8);
}

TEST(MemoryFitTest, InvalidSpecsAreRefused) {
  v1::JobSpec spec = Load("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  spec.mutable_vision()->set_degree(5);
  absl::StatusOr<std::vector<LayoutFit>> fits =
      FitLayouts(spec, *FindModelPreset("qwen2_5_vl_7b"), {int64_t{80} << 30, 8});
  EXPECT_EQ(fits.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dhp
