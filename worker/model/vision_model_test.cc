#include "worker/model/param_init.h"
#include "worker/model/vision_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/model_presets.h"
#include "worker/model/layers.h"

namespace dhp {
namespace {

const VisionConfig& TinyVision() { return FindModelPreset("tiny")->vision; }

VisionTransformer MakeTiny() {
  at::manual_seed(7);
  VisionTransformer vt(TinyVision());
  InitQwenWeights(*vt, 0.05);
  return vt;
}

int64_t Patches(const std::vector<GridThw>& grids) {
  int64_t n = 0;
  for (const GridThw& g : grids) n += g.patches();
  return n;
}

// Reference forward in the ORIGINAL patch order with dense masks: no window permutation at all.
// Each patch gets (row, col) from the merge-block layout and a window id (image, frame, window
// row, window column); block i masks attention to the same window, or the same frame for
// full-attention blocks.
at::Tensor ReferenceForward(VisionTransformer& vt, const at::Tensor& pixels,
                            const std::vector<GridThw>& grids) {
  const VisionConfig& c = vt->config();
  std::vector<float> rows, cols;
  std::vector<int64_t> window_id, frame_id;
  int64_t next_frame = 0;
  for (const GridThw& g : grids) {
    const int64_t uw = g.w / 2;
    const int64_t wins_w = uw / 4 + 1;
    for (int64_t t = 0; t < g.t; ++t, ++next_frame) {
      for (int64_t p = 0; p < g.h * g.w; ++p) {
        const int64_t u = p / 4, j = p % 4;
        const int64_t ur = u / uw, uc = u % uw;
        rows.push_back(float(ur * 2 + j / 2));
        cols.push_back(float(uc * 2 + j % 2));
        frame_id.push_back(next_frame);
        window_id.push_back(next_frame * 100000 + (ur / 4) * wins_w + uc / 4);
      }
    }
  }
  const int64_t dim = c.hidden_size / c.num_heads / 2;
  at::Tensor inv = 1.0 / at::pow(10000.0, at::arange(0, dim, 2, at::kFloat) / double(dim));
  at::Tensor fr = at::outer(at::tensor(rows), inv), fc = at::outer(at::tensor(cols), inv);
  at::Tensor emb = at::cat({fr, fc, fr, fc}, -1);  // [N, head_dim]
  at::Tensor cos = emb.cos(), sin = emb.sin();
  at::Tensor wid = at::tensor(window_id), fid = at::tensor(frame_id);
  at::Tensor win_mask = wid.unsqueeze(0) != wid.unsqueeze(1);  // true = masked
  at::Tensor full_mask = fid.unsqueeze(0) != fid.unsqueeze(1);

  at::Tensor x = vt->patch_embed(pixels);
  for (int i = 0; i < c.depth; ++i) {
    VisionBlock blk = vt->block(i);
    auto [q, k, v] = blk->attn->QkvHeads(blk->norm1(x), cos, sin);  // [N, H, D]
    at::Tensor s = at::matmul(q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2)) /
                   std::sqrt(double(q.size(2)));  // [H, N, N]
    s = s.masked_fill(vt->IsFullAttentionBlock(i) ? full_mask : win_mask,
                      -std::numeric_limits<float>::infinity());
    at::Tensor o = at::matmul(at::softmax(s, -1), v.transpose(0, 1)).transpose(0, 1);
    x = x + blk->attn->OutProj(o);
    x = x + blk->mlp(blk->norm2(x));
  }
  return vt->merger(x);
}

TEST(VisionModelTest, PatchEmbedEqualsConv3d) {
  VisionTransformer vt = MakeTiny();
  at::Tensor pixels = at::randn({12, 1176});
  at::Tensor got = vt->patch_embed(pixels);  // [12, 64]
  at::Tensor want = vt->patch_embed->proj(pixels.view({12, 3, 2, 14, 14})).view({12, 64});
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5));
  EXPECT_EQ(vt->patch_embed->proj->weight.sizes(), (std::vector<int64_t>{64, 3, 2, 14, 14}));
}

TEST(VisionModelTest, MatchesDenseMaskReferenceInOriginalOrder) {
  at::NoGradGuard no_grad;
  VisionTransformer vt = MakeTiny();
  // Odd unit grids (5x7), a grid divisible by 4 units (8x8 units), a two-frame grid.
  const std::vector<GridThw> grids = {{1, 10, 14}, {1, 16, 16}, {2, 4, 6}};
  at::Tensor pixels = at::randn({Patches(grids), 1176});
  at::Tensor got = vt(pixels, grids);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{Patches(grids) / 4, 64}));
  at::Tensor want = ReferenceForward(vt, pixels, grids);
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5))
      << "max abs diff " << (got - want).abs().max().item<float>();
}

TEST(VisionModelTest, PackedImagesAreBitIndependent) {
  at::NoGradGuard no_grad;
  VisionTransformer vt = MakeTiny();
  const std::vector<GridThw> grids = {{1, 10, 14}, {1, 8, 8}, {1, 10, 14}};
  const int64_t n0 = grids[0].patches(), n1 = grids[1].patches();
  at::Tensor pixels = at::randn({Patches(grids), 1176});
  at::Tensor base = vt(pixels, grids);
  at::Tensor perturbed = pixels.clone();
  perturbed.narrow(0, n0, n1).add_(at::randn({n1, 1176}));  // image 1 only
  at::Tensor out = vt(perturbed, grids);
  const int64_t m0 = n0 / 4, m1 = n1 / 4;
  EXPECT_TRUE(at::equal(base.narrow(0, 0, m0), out.narrow(0, 0, m0)));
  EXPECT_TRUE(at::equal(base.narrow(0, m0 + m1, m0), out.narrow(0, m0 + m1, m0)));
  EXPECT_FALSE(at::allclose(base.narrow(0, m0, m1), out.narrow(0, m0, m1)));
  // Images 0 and 2 have the same grid and differ only in pixels; image 0 alone gives the same
  // embeddings as inside the pack.
  at::Tensor alone = vt->forward(pixels.narrow(0, 0, n0), {grids[0]});
  EXPECT_TRUE(at::allclose(alone, base.narrow(0, 0, m0), 1e-5, 1e-6));
}

TEST(VisionModelTest, RejectsMismatchedGrid) {
  at::NoGradGuard no_grad;
  VisionTransformer vt = MakeTiny();
  EXPECT_THROW(vt->forward(at::randn({16, 1176}), {{1, 4, 6}}), c10::Error);
  EXPECT_THROW(vt->forward(at::randn({15, 1176}), {{1, 3, 5}}), c10::Error);
}

}  // namespace
}  // namespace dhp
