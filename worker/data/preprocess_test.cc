#include "worker/data/preprocess.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp {
namespace data {
namespace {

using ::testing::HasSubstr;

struct SizeCase {
  int h, w;
  int64_t min_pixels, max_pixels;
  int want_h, want_w;
};

// Expected values worked out by hand from the reference formulas (and cross-checked with the
// Python expressions of Hugging Face's smart_resize).
TEST(SmartResizeTest, KnownSizes) {
  const int64_t kMin = 3136, kMax = 12845056;
  const std::vector<SizeCase> cases = {
      // round(1080/28 = 38.57) = 39 -> 1092; round(1920/28 = 68.57) = 69 -> 1932; under max.
      {1080, 1920, kMin, kMax, 1092, 1932},
      // 1092*1932 > 200704: beta = sqrt(1080*1920/200704) = 1440/448; 1080/beta = 336 -> 12*28,
      // 1920/beta = 597.3 -> floor(21.33)*28 = 588.
      {1080, 1920, kMin, 200704, 336, 588},
      {1920, 1080, kMin, 200704, 588, 336},
      // 10x10 rounds to 0x0 < min: beta = sqrt(3136/100) = 5.6, ceil(56/28)*28 = 56.
      {10, 10, kMin, kMax, 56, 56},
      // 20x30 -> 28x28 = 784 < 3136: beta = 2.286, ceil(1.63)=2 -> 56, ceil(2.45)=3 -> 84.
      {20, 30, kMin, kMax, 56, 84},
      // Already a multiple of 28.
      {112, 112, kMin, kMax, 112, 112},
      // Python rounds halves to even: 70/28 = 2.5 -> 2, 126/28 = 4.5 -> 4.
      {70, 126, kMin, kMax, 56, 112},
      // 42/28 = 1.5 -> 2 (even): 56x56 = 3136, exactly min.
      {42, 42, kMin, kMax, 56, 56},
      // Max clamp on a big photo: 3000x4000 -> beta = sqrt(12e6/200704) = 7.732;
      // floor(13.86)*28 = 364, floor(18.48)*28 = 504.
      {3000, 4000, kMin, 200704, 364, 504},
      {3000, 4000, kMin, kMax, 2996, 4004},
      // Min clamp with a training-style range [256, 1280] * 28^2: 504x364 = 183456 < 200704,
      // beta = 1.0346: ceil(18.47)*28 = 532, ceil(13.86)*28 = 392.
      {500, 375, 256 * 28 * 28, 1280 * 28 * 28, 532, 392},
      // Aspect ratio exactly 200 is allowed.
      {28, 5600, kMin, kMax, 28, 5600},
  };
  for (const SizeCase& c : cases) {
    absl::StatusOr<ResizedSize> got = SmartResize(c.h, c.w, 28, c.min_pixels, c.max_pixels);
    ASSERT_TRUE(got.ok()) << c.h << "x" << c.w << ": " << got.status();
    EXPECT_EQ(got->height, c.want_h) << c.h << "x" << c.w << " max " << c.max_pixels;
    EXPECT_EQ(got->width, c.want_w) << c.h << "x" << c.w << " max " << c.max_pixels;
  }
}

TEST(SmartResizeTest, AspectRatioOver200IsAnError) {
  absl::StatusOr<ResizedSize> got = SmartResize(10, 3000, 28, 3136, 12845056);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("aspect ratio"));
  EXPECT_FALSE(SmartResize(3000, 10, 28, 3136, 12845056).ok());
  EXPECT_FALSE(SmartResize(0, 10, 28, 3136, 12845056).ok());
}

TEST(SmartResizeTest, NoRoomIsAnError) {
  // 28x5600 squeezed under 3136 pixels would need a side of 0.
  absl::StatusOr<ResizedSize> got = SmartResize(28, 5600, 28, 784, 3136);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("max_pixels"));
}

RgbImage Constant(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  RgbImage img(w, h);
  for (int i = 0; i < w * h; ++i) {
    img.pixels[i * 3] = r;
    img.pixels[i * 3 + 1] = g;
    img.pixels[i * 3 + 2] = b;
  }
  return img;
}

TEST(ResizeBicubicTest, ConstantStaysConstant) {
  const RgbImage img = Constant(37, 23, 10, 128, 250);
  for (auto [w, h] : std::vector<std::pair<int, int>>{{56, 28}, {14, 7}, {100, 3}, {37, 23}}) {
    const RgbImage out = ResizeBicubic(img, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    for (int i = 0; i < w * h; ++i) {
      ASSERT_EQ(out.pixels[i * 3], 10);
      ASSERT_EQ(out.pixels[i * 3 + 1], 128);
      ASSERT_EQ(out.pixels[i * 3 + 2], 250);
    }
  }
}

TEST(ResizeBicubicTest, DownscaleStepByHand) {
  // Row [0, 0, 255, 255] -> 2 pixels. Scale 2 widens the kernel to support 4; output 0 is
  // centred at 1.0 with taps x=0..3 at kernel arguments (x - 0.5)/2 = -0.25, 0.25, 0.75, 1.25:
  // weights 0.8671875, 0.8671875, 0.2265625, -0.0703125 (sum 1.890625), so
  // 255 * (0.2265625 - 0.0703125) / 1.890625 = 21.07 -> 21; output 1 mirrors it: 233.93 -> 234.
  RgbImage img(4, 1);
  for (int x = 2; x < 4; ++x) img.at(x, 0)[0] = img.at(x, 0)[1] = img.at(x, 0)[2] = 255;
  const RgbImage out = ResizeBicubic(img, 2, 1);
  EXPECT_EQ(out.at(0, 0)[0], 21);
  EXPECT_EQ(out.at(1, 0)[0], 234);
}

TEST(ResizeBicubicTest, UpscaleOvershootIsClamped) {
  // Cubic overshoot at a hard edge: the bright side must clamp at 255, the dark side at 0.
  RgbImage img(4, 1);
  for (int x = 2; x < 4; ++x) img.at(x, 0)[0] = 255;
  const RgbImage out = ResizeBicubic(img, 16, 1);
  for (int x = 0; x < 16; ++x) {
    if (x < 6) {
      EXPECT_EQ(out.at(x, 0)[0], 0) << x;
    } else if (x >= 10) {
      EXPECT_EQ(out.at(x, 0)[0], 255) << x;
    }
  }
  // Monotone ramp across the edge.
  for (int x = 1; x < 16; ++x) EXPECT_GE(out.at(x, 0)[0], out.at(x - 1, 0)[0]);
}

uint64_t Fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

TEST(ResizeBicubicTest, MatchesPillowBitForBit) {
  // Golden values from Pillow 9.4 (Debian 12's python3-pil): Image.resize(size, BICUBIC) of this
  // 23x17 pattern, hashed with 64-bit FNV-1a over the RGB bytes.
  RgbImage img(23, 17);
  for (int y = 0; y < 17; ++y) {
    for (int x = 0; x < 23; ++x) {
      uint8_t* p = img.at(x, y);
      p[0] = static_cast<uint8_t>((x * 37 + y * 91) % 256);
      p[1] = static_cast<uint8_t>((x * x + 3 * y) % 256);
      p[2] = (x + y) % 3 == 0 ? 255 : 0;
    }
  }
  struct Golden {
    int w, h;
    uint64_t hash;
    std::array<uint8_t, 3> centre;
  };
  for (const Golden& g : {Golden{56, 28, 0x77f2559afebc8210ull, {157, 151, 0}},
                          Golden{9, 6, 0xd3eb8664c4bd777bull, {120, 150, 85}},
                          Golden{23, 40, 0x20edf4610b0750d0ull, {135, 146, 0}}}) {
    const RgbImage out = ResizeBicubic(img, g.w, g.h);
    const uint8_t* c = out.at(g.w / 2, g.h / 2);
    EXPECT_EQ((std::array<uint8_t, 3>{c[0], c[1], c[2]}), g.centre) << g.w << "x" << g.h;
    EXPECT_EQ(Fnv1a(out.pixels), g.hash) << g.w << "x" << g.h;
  }
}

// Frames whose value encodes the source position: 1e6*frame + 1e5*channel + 100*y + x.
std::vector<float> PositionFrames(int frames, int h, int w) {
  std::vector<float> v(static_cast<size_t>(frames) * 3 * h * w);
  for (int f = 0; f < frames; ++f)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          v[((static_cast<size_t>(f) * 3 + c) * h + y) * w + x] = 1e6f * f + 1e5f * c + 100 * y + x;
  return v;
}

float Code(int f, int c, int y, int x) { return 1e6f * f + 1e5f * c + 100 * y + x; }

TEST(PatchifyTest, MergeBlockOrderByHand) {
  // 28 rows x 56 cols: gh = 2, gw = 4, one 2x2 merge block row with two blocks.
  // Patches in order: block (0,0): (r0,c0) (r0,c1) (r1,c0) (r1,c1); block (0,1): (r0,c2) (r0,c3)
  // (r1,c2) (r1,c3). Within a patch: channel, then frame, then 14x14 row-major.
  PreprocessConfig cfg;
  const ImagePatches p = Patchify(PositionFrames(2, 28, 56), 2, 28, 56, cfg);
  EXPECT_EQ(p.grid_thw, (std::array<int64_t, 3>{1, 2, 4}));
  ASSERT_EQ(p.num_patches, 8);
  ASSERT_EQ(p.patch_dim, 1176);
  ASSERT_EQ(p.values.size(), 8u * 1176);
  auto at = [&](int patch, int elem) { return p.values[patch * 1176 + elem]; };
  // Patch 1 = row 0, col 1: pixel (y=0, x=14).
  EXPECT_EQ(at(1, 0), Code(0, 0, 0, 14));
  // Patch 2 = row 1, col 0: pixel (y=14, x=0).
  EXPECT_EQ(at(2, 0), Code(0, 0, 14, 0));
  // Patch 5 = row 0, col 3; element c=1, frame=1, py=2, px=3 -> 392 + 196 + 28 + 3.
  EXPECT_EQ(at(5, 392 + 196 + 2 * 14 + 3), Code(1, 1, 2, 42 + 3));
  // Patch 6 = row 1, col 2; last element: c=2, frame=1, py=13, px=13.
  EXPECT_EQ(at(6, 1175), Code(1, 2, 14 + 13, 28 + 13));
  // Patch 7 = row 1, col 3; element c=2, frame=0, py=0, px=0 at 2*392.
  EXPECT_EQ(at(7, 784), Code(0, 2, 14, 42));
  EXPECT_EQ(NumImageTokens(p.grid_thw, 2), 2);
}

TEST(PatchifyTest, TallImageBlocksGoRowMajor) {
  // 56 rows x 28 cols: gh = 4, gw = 2: block (0,0) then block (1,0).
  PreprocessConfig cfg;
  const ImagePatches p = Patchify(PositionFrames(2, 56, 28), 2, 56, 28, cfg);
  EXPECT_EQ(p.grid_thw, (std::array<int64_t, 3>{1, 4, 2}));
  auto at = [&](int patch, int elem) { return p.values[patch * 1176 + elem]; };
  EXPECT_EQ(at(2, 0), Code(0, 0, 14, 0));   // row 1, col 0
  EXPECT_EQ(at(3, 0), Code(0, 0, 14, 14));  // row 1, col 1
  EXPECT_EQ(at(4, 0), Code(0, 0, 28, 0));   // row 2, col 0 (second block)
  EXPECT_EQ(at(7, 14 + 5), Code(0, 0, 42 + 1, 14 + 5));  // row 3, col 1, py=1, px=5
}

TEST(PatchifyTest, TwoTemporalGroups) {
  // Four frames -> t = 2; the second group starts after all patches of the first.
  PreprocessConfig cfg;
  const ImagePatches p = Patchify(PositionFrames(4, 28, 28), 4, 28, 28, cfg);
  EXPECT_EQ(p.grid_thw, (std::array<int64_t, 3>{2, 2, 2}));
  EXPECT_EQ(p.values[4 * 1176 + 0], Code(2, 0, 0, 0));
  EXPECT_EQ(p.values[4 * 1176 + 196], Code(3, 0, 0, 0));
}

TEST(PreprocessImageTest, ConstantImageNormalisesPerChannel) {
  const RgbImage img = Constant(60, 50, 255, 0, 128);  // -> smart resize 56x56
  absl::StatusOr<ImagePatches> p = PreprocessImage(img, PreprocessConfig());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->grid_thw, (std::array<int64_t, 3>{1, 4, 4}));
  EXPECT_EQ(p->num_patches, 16);
  EXPECT_EQ(NumImageTokens(p->grid_thw, 2), 4);
  const float want[3] = {(1.0f - 0.48145466f) / 0.26862954f, (0.0f - 0.4578275f) / 0.26130258f,
                         (static_cast<float>(128 / 255.0) - 0.40821073f) / 0.27577711f};
  for (int patch = 0; patch < 16; ++patch) {
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 392; ++i) {
        ASSERT_FLOAT_EQ(p->values[patch * 1176 + c * 392 + i], want[c]) << patch << " " << c;
      }
    }
  }
}

TEST(PreprocessImageTest, MaxPixelsShrinksTheGrid) {
  PreprocessConfig cfg;
  cfg.max_pixels = 200704;
  absl::StatusOr<ImagePatches> p = PreprocessImage(Constant(1920, 1080, 1, 2, 3), cfg);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->grid_thw, (std::array<int64_t, 3>{1, 24, 42}));  // 336/14, 588/14
  EXPECT_EQ(NumImageTokens(p->grid_thw, 2), 252);
}

}  // namespace
}  // namespace data
}  // namespace dhp
