#include "worker/data/packing.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp {
namespace data {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t P = 99;  // image pad id in these tests

ImagePatches Image(int64_t gh, int64_t gw, float fill) {
  ImagePatches img;
  img.grid_thw = {1, gh, gw};
  img.num_patches = gh * gw;
  img.patch_dim = 2;  // small on purpose
  img.values.assign(img.num_patches * 2, fill);
  return img;
}

TrainingSample Sample(const std::string& name, std::vector<int64_t> ids,
                      std::vector<ImagePatches> images = {}) {
  TrainingSample s;
  s.location = name;
  s.labels.assign(ids.size(), -100);
  s.labels.back() = ids.back();
  s.input_ids = std::move(ids);
  s.images = std::move(images);
  return s;
}

TEST(MropePositionsTest, TextImageTextByHand) {
  // Text 0, 1; a 4x4-patch image = 2x2 merged tokens starting at 2: (t, h, w) = (2,2,2),
  // (2,2,3), (2,3,2), (2,3,3); text resumes at max + 1 = 4.
  absl::StatusOr<std::vector<int64_t>> pos =
      MropePositions({1, 2, P, P, P, P, 3, 4}, {{1, 4, 4}}, P, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_THAT(*pos, ElementsAre(0, 1, 2, 2, 2, 2, 4, 5,    // t
                                0, 1, 2, 2, 3, 3, 4, 5,    // h
                                0, 1, 2, 3, 2, 3, 4, 5));  // w
}

TEST(MropePositionsTest, WideImageAndTwoImages) {
  // A 2x6-patch image is 1x3 merged: w runs 1..3, then text resumes at 1 + 2 + 1 = 4.
  // The second image (2x2 patches, one token) starts at 5.
  absl::StatusOr<std::vector<int64_t>> pos =
      MropePositions({7, P, P, P, 8, P, 9}, {{1, 2, 6}, {1, 2, 2}}, P, 2);
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_THAT(*pos, ElementsAre(0, 1, 1, 1, 4, 5, 6,   // t
                                0, 1, 1, 1, 4, 5, 6,   // h
                                0, 1, 2, 3, 4, 5, 6)); // w
}

TEST(MropePositionsTest, MismatchesAreErrors) {
  EXPECT_THAT(MropePositions({1, P, P, 2}, {{1, 4, 4}}, P, 2).status().message(),
              HasSubstr("2 image tokens at position 1 but its grid (1, 4, 4) needs 4"));
  EXPECT_FALSE(MropePositions({1, P, 2}, {}, P, 2).ok());
  EXPECT_FALSE(MropePositions({1, 2}, {{1, 2, 2}}, P, 2).ok());
}

TEST(PackSamplesTest, GreedyPackingWithBoundariesAndImages) {
  std::vector<TrainingSample> samples;
  samples.push_back(Sample("a", {1, 2, P, P, P, P, 3, 4}, {Image(4, 4, 1.0f)}));
  samples.push_back(Sample("b", {5, 6, 7, 8, 9}));
  samples.push_back(Sample("c", {1, P, 2}, {Image(2, 2, 3.0f)}));
  samples.push_back(Sample("d", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  PackingOptions options;
  options.max_tokens = 16;
  options.image_pad_id = P;
  absl::StatusOr<std::vector<PackedSequence>> packs = PackSamples(std::move(samples), options);
  ASSERT_TRUE(packs.ok()) << packs.status();
  ASSERT_EQ(packs->size(), 2u);  // a+b+c = 16 tokens, then d

  const PackedSequence& p = (*packs)[0];
  EXPECT_THAT(p.input_ids, ElementsAre(1, 2, P, P, P, P, 3, 4, 5, 6, 7, 8, 9, 1, P, 2));
  EXPECT_THAT(p.cu_seqlens, ElementsAre(0, 8, 13, 16));
  EXPECT_THAT(p.sample_locations, ElementsAre("a", "b", "c"));
  EXPECT_EQ(p.labels.size(), 16u);
  EXPECT_EQ(p.labels[7], 4);
  EXPECT_EQ(p.labels[8], -100);
  // Positions restart at each sample: t axis of a, b, c.
  EXPECT_THAT(std::vector<int64_t>(p.position_ids.begin(), p.position_ids.begin() + 16),
              ElementsAre(0, 1, 2, 2, 2, 2, 4, 5, 0, 1, 2, 3, 4, 0, 1, 2));
  // w axis of c: text 0, image token at 1 (single merged token), text 2.
  EXPECT_THAT(std::vector<int64_t>(p.position_ids.begin() + 32 + 13, p.position_ids.end()),
              ElementsAre(0, 1, 2));
  ASSERT_EQ(p.position_ids.size(), 48u);
  // Images: a's 16 patches then c's 4; which sample each belongs to.
  EXPECT_EQ(p.num_patches, 20);
  EXPECT_EQ(p.patch_dim, 2);
  ASSERT_EQ(p.pixel_values.size(), 40u);
  EXPECT_EQ(p.pixel_values[31], 1.0f);
  EXPECT_EQ(p.pixel_values[32], 3.0f);
  EXPECT_THAT(p.image_sample, ElementsAre(0, 2));
  EXPECT_EQ(p.image_grid_thw[1], (std::array<int64_t, 3>{1, 2, 2}));

  const PackedSequence& q = (*packs)[1];
  EXPECT_THAT(q.cu_seqlens, ElementsAre(0, 10));
  EXPECT_EQ(q.num_patches, 0);
  EXPECT_TRUE(q.image_grid_thw.empty());
}

TEST(PackSamplesTest, PatchLimitStartsANewSequence) {
  std::vector<TrainingSample> samples;
  samples.push_back(Sample("a", {1, P, P, P, P, 2}, {Image(4, 4, 0)}));
  samples.push_back(Sample("b", {1, P, P, P, P, 2}, {Image(4, 4, 0)}));
  PackingOptions options;
  options.max_tokens = 100;
  options.max_patches = 20;
  options.image_pad_id = P;
  absl::StatusOr<std::vector<PackedSequence>> packs = PackSamples(std::move(samples), options);
  ASSERT_TRUE(packs.ok()) << packs.status();
  EXPECT_EQ(packs->size(), 2u);
}

TEST(PackSamplesTest, OversizedSampleIsAnErrorNamingIt) {
  std::vector<TrainingSample> samples;
  samples.push_back(Sample("data.jsonl:7", {1, 2, 3, 4, 5}));
  PackingOptions options;
  options.max_tokens = 4;
  absl::StatusOr<std::vector<PackedSequence>> packs = PackSamples(std::move(samples), options);
  ASSERT_FALSE(packs.ok());
  EXPECT_THAT(packs.status().message(), HasSubstr("data.jsonl:7: sample has 5 tokens"));
}

}  // namespace
}  // namespace data
}  // namespace dhp
