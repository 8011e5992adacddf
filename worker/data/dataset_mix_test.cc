#include "worker/data/dataset_mix.h"

#include <cstdlib>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/file_util.h"

namespace dhp {
namespace data {
namespace {

using ::testing::HasSubstr;

DatasetMix::Dataset Fake(const std::string& name, int n, double weight) {
  DatasetMix::Dataset d;
  d.name = name;
  d.source.annotation_path = name + ".jsonl";
  d.source.weight = weight;
  for (int i = 0; i < n; ++i) {
    LlavaRecord r;
    r.location = name + ":" + std::to_string(i + 1);
    d.records.push_back(r);
  }
  return d;
}

TEST(DatasetRegistryTest, RegisterAndFind) {
  DatasetRegistry reg;
  ASSERT_TRUE(reg.Register("shapes", {"data/shapes/train.jsonl", "data/shapes", 1.0}).ok());
  ASSERT_TRUE(reg.Register("coco", {"coco.json", "/coco", 2.0}).ok());
  EXPECT_EQ(reg.Register("shapes", {"x.jsonl", "", 1.0}).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(reg.Register("neg", {"x.jsonl", "", -1.0}).ok());
  EXPECT_FALSE(reg.Register("", {"x.jsonl", "", 1.0}).ok());
  EXPECT_FALSE(reg.Register("nopath", {"", "", 1.0}).ok());
  EXPECT_EQ(reg.Find("coco")->image_root, "/coco");
  absl::StatusOr<DatasetSource> missing = reg.Find("laion");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("coco, shapes"));
}

TEST(DatasetMixTest, SingleDatasetEpochIsAPermutation) {
  absl::StatusOr<DatasetMix> mix = DatasetMix::FromDatasets({Fake("a", 50, 1.0)});
  ASSERT_TRUE(mix.ok()) << mix.status();
  EXPECT_EQ(mix->epoch_size(), 50);
  const std::vector<SampleRef> e0 = mix->EpochOrder(42, 0);
  std::set<int64_t> seen;
  for (const SampleRef& r : e0) seen.insert(r.index);
  EXPECT_EQ(seen.size(), 50u);
  // Deterministic from (seed, epoch); epochs and seeds differ.
  EXPECT_EQ(e0, mix->EpochOrder(42, 0));
  EXPECT_NE(e0, mix->EpochOrder(42, 1));
  EXPECT_NE(e0, mix->EpochOrder(43, 0));
}

TEST(DatasetMixTest, WeightsAreRelativeRates) {
  // Sizes 100 and 20, weights 1 and 3: an epoch has 120 draws, 30 from a and 90 from b (b's
  // 20 records repeat 4.5 times).
  absl::StatusOr<DatasetMix> mix =
      DatasetMix::FromDatasets({Fake("a", 100, 1.0), Fake("b", 20, 3.0)});
  ASSERT_TRUE(mix.ok());
  const std::vector<SampleRef> e0 = mix->EpochOrder(1, 0);
  ASSERT_EQ(e0.size(), 120u);
  std::map<int, int> per_dataset;
  for (const SampleRef& r : e0) ++per_dataset[r.dataset];
  EXPECT_EQ(per_dataset[0], 30);
  EXPECT_EQ(per_dataset[1], 90);
  // Dataset b's draws are whole passes over its records: each appears 4 or 5 times.
  std::map<int64_t, int> b_counts;
  for (const SampleRef& r : e0) b_counts[r.index] += r.dataset == 1;
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(b_counts[i] == 4 || b_counts[i] == 5) << i;
  // Dataset a, drawn 30 per epoch, visits all 100 records in its first four epochs (a pass is
  // 100 draws, so epochs 0-3 cover draws 0..119 >= one full pass).
  std::set<int64_t> a_seen;
  for (int epoch = 0; epoch < 4; ++epoch) {
    for (const SampleRef& r : mix->EpochOrder(1, epoch)) {
      if (r.dataset == 0) a_seen.insert(r.index);
    }
  }
  EXPECT_EQ(a_seen.size(), 100u);
}

TEST(DatasetMixTest, ZeroWeightDatasetIsNeverDrawn) {
  absl::StatusOr<DatasetMix> mix = DatasetMix::FromDatasets({Fake("a", 7, 1.0), Fake("b", 5, 0.0)});
  ASSERT_TRUE(mix.ok());
  for (const SampleRef& r : mix->EpochOrder(0, 0)) EXPECT_EQ(r.dataset, 0);
  EXPECT_FALSE(DatasetMix::FromDatasets({Fake("a", 3, 0.0)}).ok());
  EXPECT_FALSE(DatasetMix::FromDatasets({Fake("a", 0, 1.0)}).ok());
}

TEST(DatasetMixTest, LoadsFromTheRegistry) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/dataset_mix_test";
  const std::string rec =
      R"({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]})";
  ASSERT_TRUE(WriteStringToFile(rec + "\n" + rec + "\n", dir + "/one.jsonl").ok());
  ASSERT_TRUE(WriteStringToFile(rec + "\n{\"bad\": 1}\n", dir + "/two.jsonl").ok());
  DatasetRegistry reg;
  ASSERT_TRUE(reg.Register("one", {dir + "/one.jsonl", dir, 1.0}).ok());
  ASSERT_TRUE(reg.Register("two", {dir + "/two.jsonl", dir, 1.0}).ok());
  absl::StatusOr<DatasetMix> mix = DatasetMix::Load(reg, {"one"});
  ASSERT_TRUE(mix.ok()) << mix.status();
  EXPECT_EQ(mix->epoch_size(), 2);
  EXPECT_EQ(mix->record({0, 1}).location, dir + "/one.jsonl:2");
  EXPECT_EQ(mix->image_root({0, 1}), dir);

  absl::StatusOr<DatasetMix> bad = DatasetMix::Load(reg, {"one", "two"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("two.jsonl:2: missing key \"conversations\""));
  std::vector<absl::Status> skipped;
  absl::StatusOr<DatasetMix> lenient = DatasetMix::Load(reg, {"one", "two"}, &skipped);
  ASSERT_TRUE(lenient.ok());
  EXPECT_EQ(lenient->epoch_size(), 3);
  EXPECT_EQ(skipped.size(), 1u);
  EXPECT_FALSE(DatasetMix::Load(reg, {"three"}).ok());
}

}  // namespace
}  // namespace data
}  // namespace dhp
