#include "common/elastic.h"

#include <string>
#include <vector>

#include "common/job_layout.h"
#include "gtest/gtest.h"

namespace dhp {
namespace {

constexpr char kRoot[] = "/var/lib/dhp/checkpoints";

v1::JobSpec Spec(const std::string& extra,
                 const std::string& training = "training: {max_steps: 100, batch_size: 8}\n") {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      "name: demo\n"
      "model: {preset: qwen2_5_vl_7b}\n"
      "vision: {parallelism: sequence, degree: 4}\n"
      "text: {parallelism: tensor, degree: 4}\n"
      "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n" +
          training + extra,
      SpecOptions{kRoot});
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::JobSpec());
}

std::vector<std::string> Layouts(const std::vector<v1::JobSpec>& specs) {
  std::vector<std::string> out;
  for (const v1::JobSpec& s : specs) out.push_back(LayoutForSpec(s).DebugString());
  return out;
}

TEST(ElasticLayoutsTest, WithoutBoundsOnlyTheSpecsOwnLayout) {
  const v1::JobSpec spec = Spec("data_parallel_size: 2\n");
  const std::vector<v1::JobSpec> layouts = ElasticLayouts(spec, SpecOptions{kRoot});
  ASSERT_EQ(layouts.size(), 1u);
  EXPECT_EQ(layouts[0].SerializeAsString(), spec.SerializeAsString());
}

TEST(ElasticLayoutsTest, LargestFirstOwnFirstAmongEqualsAndOnlyValidDegrees) {
  // 7B: 16 vision heads, 28 text heads (4 KV heads); batch 8. Text degrees 1..8 that divide
  // 28 and suit the KV heads: 1, 2, 4 (7 does not divide the MLP width 18944; 8 not 28).
  const v1::JobSpec spec = Spec(
      "data_parallel_size: 2\n"
      "elastic: {data_parallel_size: {min: 1, max: 3}, text_degree: {min: 1, max: 8}}\n");
  const std::vector<std::string> got = Layouts(ElasticLayouts(spec, SpecOptions{kRoot}));
  // dp 3 does not divide batch 8. Collocated: world = max(vision, text) x dp.
  const std::vector<std::string> want = {
      "vision 4 (sp) x text 4 x dp 2, collocated",  // own (8 ranks) before the other 8-rank ones
      "vision 4 (sp) x text 2 x dp 2, collocated",
      "vision 4 (sp) x text 1 x dp 2, collocated",
      "vision 4 (sp) x text 4 x dp 1, collocated",
      "vision 4 (sp) x text 2 x dp 1, collocated",
      "vision 4 (sp) x text 1 x dp 1, collocated",
  };
  EXPECT_EQ(got, want);
}

TEST(ElasticLayoutsTest, ANewDataParallelSizeKeepsTheWholeShareMicroBatch) {
  const v1::JobSpec spec =
      Spec("data_parallel_size: 4\nelastic: {data_parallel_size: {min: 1}}\n");
  ASSERT_EQ(spec.training().micro_batch_size(), 2);
  const std::vector<v1::JobSpec> layouts = ElasticLayouts(spec, SpecOptions{kRoot});
  ASSERT_EQ(layouts.size(), 3u);  // dp 4, 2, 1 (3 does not divide 8)
  EXPECT_EQ(layouts[1].data_parallel_size(), 2);
  EXPECT_EQ(layouts[1].training().micro_batch_size(), 4);
  EXPECT_EQ(layouts[2].training().micro_batch_size(), 8);
  // The bounds travel with every layout, and each layout validates again as stored.
  for (v1::JobSpec s : layouts) {
    EXPECT_EQ(s.elastic().data_parallel_size().min(), 1);
    EXPECT_TRUE(NormalizeAndValidateSpec(&s, SpecOptions{kRoot}).ok());
  }
}

TEST(ElasticLayoutsTest, AGradientAccumulationMicroBatchLimitsTheDataParallelSizes) {
  // micro_batch 2 must divide 8 / dp: dp 1, 2 and 4 pass; dp 8 (share 1) does not.
  const v1::JobSpec spec = Spec(
      "data_parallel_size: 2\nelastic: {data_parallel_size: {min: 1, max: 8}}\n",
      "training: {max_steps: 100, batch_size: 8, micro_batch_size: 2}\n");
  std::vector<int> dps;
  for (const v1::JobSpec& s : ElasticLayouts(spec, SpecOptions{kRoot})) {
    dps.push_back(s.data_parallel_size());
    EXPECT_EQ(s.training().micro_batch_size(), 2);
  }
  EXPECT_EQ(dps, (std::vector<int>{4, 2, 1}));
}

TEST(ElasticLayoutsTest, AtMostSixteenLayoutsAndAlwaysTheSmallest) {
  const v1::JobSpec spec = Spec("elastic: {data_parallel_size: {max: 4096}}\n",
                                "training: {max_steps: 100, batch_size: 720720}\n");
  const std::vector<v1::JobSpec> layouts = ElasticLayouts(spec, SpecOptions{kRoot});
  ASSERT_EQ(layouts.size(), static_cast<size_t>(kMaxElasticLayouts));
  EXPECT_EQ(layouts.front().data_parallel_size(), 4095);  // largest divisor of 720720 <= 4096
  EXPECT_EQ(layouts.back().data_parallel_size(), 1);
  for (size_t i = 1; i + 1 < layouts.size(); ++i) {
    EXPECT_GT(layouts[i - 1].data_parallel_size(), layouts[i].data_parallel_size());
  }
}

TEST(ElasticLayoutsTest, AnUnknownArchitectureVariesOnlyTheDataParallelSize) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(
      "name: demo\n"
      "model: {weights_path: models/mine}\n"
      "vision: {parallelism: sequence, degree: 2}\n"
      "text: {parallelism: tensor, degree: 2}\n"
      "data_parallel_size: 2\n"
      "training: {max_steps: 10, batch_size: 2}\n"
      "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n"
      "elastic: {data_parallel_size: {min: 1}, text_degree: {min: 1}, vision_degree: {min: 1}}\n",
      SpecOptions{kRoot});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(Layouts(ElasticLayouts(*spec, SpecOptions{kRoot})),
            (std::vector<std::string>{"vision 2 (sp) x text 2 x dp 2, collocated",
                                      "vision 2 (sp) x text 2 x dp 1, collocated"}));
}

}  // namespace
}  // namespace dhp
