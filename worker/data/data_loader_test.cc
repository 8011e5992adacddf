#include "worker/data/data_loader.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/file_util.h"
#include "worker/data/shapes_generator.h"

namespace dhp {
namespace data {
namespace {

using ::testing::HasSubstr;

class DataLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/data_loader_test";
    ASSERT_TRUE(WriteShapesDataset({dir_, 6, 56, 3}).ok());
    auto tok = BpeTokenizer::FromFile("configs/tiny-tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
    tmpl_ = std::make_unique<ChatTemplate>(*ChatTemplate::Create(*tok_));
    builder_ = std::make_unique<SampleBuilder>(*tmpl_, SampleBuilderOptions());
    ASSERT_TRUE(registry_.Register("shapes", {dir_ + "/train.jsonl", dir_, 1.0}).ok());
    auto mix = DatasetMix::Load(registry_, {"shapes"});
    ASSERT_TRUE(mix.ok()) << mix.status();
    mix_ = std::make_unique<DatasetMix>(std::move(*mix));
  }

  std::vector<std::string> Locations(const std::vector<TrainingSample>& v) {
    std::vector<std::string> out;
    for (const auto& s : v) out.push_back(s.location);
    return out;
  }

  std::string dir_;
  std::unique_ptr<BpeTokenizer> tok_;
  std::unique_ptr<ChatTemplate> tmpl_;
  std::unique_ptr<SampleBuilder> builder_;
  DatasetRegistry registry_;
  std::unique_ptr<DatasetMix> mix_;
};

TEST_F(DataLoaderTest, FollowsTheEpochOrdersAcrossEpochs) {
  DataLoader loader(*mix_, *builder_, {/*seed=*/9});
  std::vector<std::string> got;
  for (int step = 0; step < 3; ++step) {  // 12 draws = 2 epochs of 6
    auto batch = loader.NextBatch(4);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->size(), 4u);
    for (const auto& l : Locations(*batch)) got.push_back(l);
  }
  std::vector<std::string> want;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const SampleRef& r : mix_->EpochOrder(9, epoch)) want.push_back(mix_->record(r).location);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(loader.position().epoch, 1);
  EXPECT_EQ(loader.position().offset, 6);
}

TEST_F(DataLoaderTest, SeekResumesExactly) {
  DataLoader a(*mix_, *builder_, {5});
  ASSERT_TRUE(a.NextBatch(5).ok());
  const DataPosition saved = a.position();
  auto next_a = a.NextBatch(4);
  DataLoader b(*mix_, *builder_, {5});
  b.Seek(saved);
  auto next_b = b.NextBatch(4);
  ASSERT_TRUE(next_a.ok() && next_b.ok());
  EXPECT_EQ(Locations(*next_a), Locations(*next_b));
  EXPECT_EQ((*next_a)[0].input_ids, (*next_b)[0].input_ids);
}

TEST_F(DataLoaderTest, ShardsSplitEachBatch) {
  DataLoader whole(*mix_, *builder_, {1});
  DataLoaderOptions o0{1}, o1{1};
  o0.num_shards = o1.num_shards = 2;
  o1.shard_index = 1;
  DataLoader s0(*mix_, *builder_, o0), s1(*mix_, *builder_, o1);
  auto w = Locations(*whole.NextBatch(4));
  auto a = Locations(*s0.NextBatch(4));
  auto b = Locations(*s1.NextBatch(4));
  EXPECT_EQ(a, (std::vector<std::string>{w[0], w[2]}));
  EXPECT_EQ(b, (std::vector<std::string>{w[1], w[3]}));
}

TEST_F(DataLoaderTest, InvalidSamplesAreSkippedOrReported) {
  // A dataset whose second record points at a missing image.
  const std::string ok =
      R"({"image": "images/000000.png", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}]})";
  const std::string bad =
      R"({"image": "images/nope.png", "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}]})";
  ASSERT_TRUE(WriteStringToFile(ok + "\n" + bad + "\n", dir_ + "/mixed.jsonl").ok());
  ASSERT_TRUE(registry_.Register("mixed", {dir_ + "/mixed.jsonl", dir_, 1.0}).ok());
  auto mix = DatasetMix::Load(registry_, {"mixed"});
  ASSERT_TRUE(mix.ok());
  DataLoader lenient(*mix, *builder_, {0});
  auto batch = lenient.NextBatch(2);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->size(), 1u);
  EXPECT_EQ(lenient.skipped(), 1);
  ASSERT_EQ(lenient.skipped_errors().size(), 1u);
  EXPECT_THAT(lenient.skipped_errors()[0], HasSubstr("mixed.jsonl:2: image 0: "));

  DataLoaderOptions strict_options{0};
  strict_options.skip_invalid = false;
  DataLoader strict(*mix, *builder_, strict_options);
  auto failed = strict.NextBatch(2);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("images/nope.png"));
}

}  // namespace
}  // namespace data
}  // namespace dhp
