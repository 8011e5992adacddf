#include "worker/rank/step_flops.h"

#include "gtest/gtest.h"

namespace dhp {
namespace {

// A model small enough to count by hand.
ModelPreset HandModel() {
  ModelPreset m;
  m.name = "hand";
  m.vision.depth = 2;
  m.vision.hidden_size = 8;
  m.vision.num_heads = 2;
  m.vision.intermediate_size = 16;
  m.vision.fullatt_block_indexes = {1};
  m.vision.out_hidden_size = 8;  // patch 14, temporal 2, merge 2, window 112 px = 8 patches
  m.text.hidden_size = 8;
  m.text.num_layers = 1;
  m.text.num_heads = 2;  // head_dim 4: q width 8
  m.text.num_kv_heads = 1;  // kv width 4
  m.text.intermediate_size = 16;
  m.text.vocab_size = 10;
  m.text.mrope_section = {1, 0, 1};
  return m;
}

TEST(StepFlopsTest, HandCountedCase) {
  // One 4x4-patch image (16 patches, 4 merged tokens, one window) and two samples of 5 and 3
  // tokens.
  absl::StatusOr<StepFlops> f = CountStepFlops(HandModel(), {{1, 4, 4}}, {5, 3});
  ASSERT_TRUE(f.ok()) << f.status();
  // Vision per patch: patch embed 2*1176*8 = 18816; per block qkv 2*8*24 = 384, proj 2*8*8 = 128,
  // MLP 3*2*8*16 = 768 -> 1280, x2 blocks = 2560. Merger per merged token: 2*32*32 + 2*32*8
  // = 2560. 16 * (18816 + 2560) + 4 * 2560 = 352256.
  EXPECT_EQ(f->vision_linear, 352256);
  // Both blocks attend over one segment of 16: 2 * 4 * 16^2 * 8 = 16384.
  EXPECT_EQ(f->vision_attention, 16384);
  // Text per token: q 2*8*8 = 128, k and v 2*8*4 = 64 each, o 128, MLP 3*2*8*16 = 768 -> 1152;
  // LM head 2*8*10 = 160. 8 tokens * 1312 = 10496.
  EXPECT_EQ(f->text_linear, 10496);
  // 4 * (5^2 + 3^2) * 8 = 1088.
  EXPECT_EQ(f->text_attention, 1088);
  EXPECT_EQ(f->forward(), 352256 + 16384 + 10496 + 1088);
  EXPECT_EQ(f->training(), 3 * 380224);
}

TEST(StepFlopsTest, WindowAndFullBlocksUseTheirSegments) {
  // An 8x12-patch image: windows of 8x8 and 8x4 patches (64 and 32); the full block sees 96.
  absl::StatusOr<StepFlops> f = CountStepFlops(HandModel(), {{1, 8, 12}}, {40});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->vision_attention, 4 * 8 * (64 * 64 + 32 * 32) + 4 * 8 * 96 * 96);
  EXPECT_EQ(f->text_attention, 4 * 40 * 40 * 8);
}

TEST(StepFlopsTest, TextOnlyAndErrors) {
  absl::StatusOr<StepFlops> f = CountStepFlops(HandModel(), {}, {4});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->vision_linear + f->vision_attention, 0);
  EXPECT_EQ(f->text_linear, 4 * 1312);
  EXPECT_FALSE(CountStepFlops(HandModel(), {}, {0}).ok());
  EXPECT_FALSE(CountStepFlops(HandModel(), {{1, 3, 4}}, {4}).ok());  // odd grid side
}

}  // namespace
}  // namespace dhp
