#include "worker/rank/batch.h"

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "worker/model/text_model.h"

namespace dhp {
namespace {

// Two samples: [0, 4) with one image of grid (1, 2, 2) (4 patches, 1 image token),
// and [4, 7) text only.
data::PackedSequence HandMade() {
  data::PackedSequence p;
  p.input_ids = {1, 7, 5, 8, 1, 9, 3};
  p.labels = {-100, -100, -100, 8, -100, 9, 3};
  p.cu_seqlens = {0, 4, 7};
  p.position_ids = {0, 1, 2, 3, 0, 1, 2,   // t
                    0, 1, 2, 3, 0, 1, 2,   // h
                    0, 1, 2, 3, 0, 1, 2};  // w
  p.num_patches = 4;
  p.patch_dim = 3;
  for (int i = 0; i < 12; ++i) p.pixel_values.push_back(0.5f * i);
  p.image_grid_thw = {{1, 2, 2}};
  p.image_sample = {0};
  p.sample_locations = {"a:1", "a:2"};
  return p;
}

TEST(BatchTest, CopiesEveryFieldToTensors) {
  const data::PackedSequence p = HandMade();
  PackedBatch b = ToPackedBatch(p, at::kCPU);
  ASSERT_EQ(b.input_ids.sizes(), at::IntArrayRef({7}));
  EXPECT_EQ(b.input_ids.scalar_type(), at::kLong);
  EXPECT_EQ(b.input_ids[5].item<int64_t>(), 9);
  EXPECT_EQ(b.labels[0].item<int64_t>(), -100);
  EXPECT_EQ(b.labels[6].item<int64_t>(), 3);
  ASSERT_EQ(b.position_ids.sizes(), at::IntArrayRef({3, 7}));
  EXPECT_EQ(b.position_ids[2][3].item<int64_t>(), 3);
  ASSERT_EQ(b.pixel_values.sizes(), at::IntArrayRef({4, 3}));
  EXPECT_EQ(b.pixel_values.scalar_type(), at::kFloat);
  EXPECT_FLOAT_EQ(b.pixel_values[3][2].item<float>(), 5.5f);
  EXPECT_EQ(b.cu_seqlens, p.cu_seqlens);
  ASSERT_EQ(b.image_grids.size(), 1u);
  EXPECT_EQ(b.image_grids[0], (GridThw{1, 2, 2}));
  // A copy, not a view of the vectors.
  EXPECT_NE(b.pixel_values.data_ptr<float>(), p.pixel_values.data());
}

TEST(BatchTest, NoImagesLeavesPixelsUndefined) {
  data::PackedSequence p = HandMade();
  p.pixel_values.clear();
  p.num_patches = 0;
  p.image_grid_thw.clear();
  EXPECT_FALSE(ToPackedBatch(p, at::kCPU).pixel_values.defined());
}

TEST(BatchTest, InconsistentSizesThrowValueError) {
  data::PackedSequence p = HandMade();
  p.position_ids.pop_back();
  EXPECT_THROW(ToPackedBatch(p, at::kCPU), c10::ValueError);
}

TEST(BatchTest, CountsMatchTheLoss) {
  const data::PackedSequence p = HandMade();
  // Targets: position 2 -> label 8 (index 3); index 4 starts sample 2 (not counted);
  // 4 -> 9, 5 -> 3. So 3.
  EXPECT_EQ(CountLossTargets(p), 3);
  PackedBatch b = ToPackedBatch(p, at::kCPU);
  auto [sum, count] = CausalLmLossSum(at::randn({7, 16}), b.labels, b.cu_seqlens);
  EXPECT_EQ(count.item<int64_t>(), CountLossTargets(p));
  EXPECT_EQ(CountImageTokens(p, 2), 1);
}

}  // namespace
}  // namespace dhp
