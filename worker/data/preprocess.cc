#include "worker/data/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace dhp {
namespace data {
namespace {

// Python's round(): nearest, ties to even (the default floating-point rounding mode).
double PyRound(double x) { return std::nearbyint(x); }

// Keys' cubic convolution kernel with a = -0.5 (Pillow's BICUBIC), support 2.
double CubicKernel(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

constexpr int kPrecisionBits = 32 - 8 - 2;  // fixed-point weights, as Pillow's 8-bit path

// Per output sample: the first input index, the number of taps, and the fixed-point weights.
struct Taps {
  int max_taps = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;  // [out_size, max_taps]
};

Taps ComputeTaps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);  // widen the kernel when downsampling
  const double support = 2.0 * filter_scale;
  Taps taps;
  taps.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(static_cast<size_t>(out_size) * taps.max_taps, 0);
  std::vector<double> w(taps.max_taps);
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // Truncation toward zero, as a C cast, then clamped to the input.
    int lo = static_cast<int>(center - support + 0.5);
    int hi = static_cast<int>(center + support + 0.5);
    lo = std::max(lo, 0);
    hi = std::min(hi, in_size);
    const int n = hi - lo;
    double sum = 0.0;
    for (int k = 0; k < n; ++k) {
      w[k] = CubicKernel((lo + k - center + 0.5) / filter_scale);
      sum += w[k];
    }
    for (int k = 0; k < n; ++k) {
      const double v = sum != 0.0 ? w[k] / sum : w[k];
      const double fixed = v * (1 << kPrecisionBits);
      taps.weights[static_cast<size_t>(i) * taps.max_taps + k] =
          static_cast<int32_t>(v < 0 ? std::trunc(fixed - 0.5) : std::trunc(fixed + 0.5));
    }
    taps.first[i] = lo;
    taps.count[i] = n;
  }
  return taps;
}

uint8_t ClampFixed(int64_t acc) {
  // acc already holds the +0.5 rounding term; an arithmetic shift floors.
  const int64_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

RgbImage ResizeHorizontal(const RgbImage& in, int out_width) {
  const Taps taps = ComputeTaps(in.width, out_width);
  RgbImage out(out_width, in.height);
  for (int y = 0; y < in.height; ++y) {
    for (int x = 0; x < out_width; ++x) {
      const int32_t* k = &taps.weights[static_cast<size_t>(x) * taps.max_taps];
      for (int c = 0; c < 3; ++c) {
        int64_t acc = int64_t{1} << (kPrecisionBits - 1);
        for (int t = 0; t < taps.count[x]; ++t) acc += int64_t{in.at(taps.first[x] + t, y)[c]} * k[t];
        out.at(x, y)[c] = ClampFixed(acc);
      }
    }
  }
  return out;
}

RgbImage ResizeVertical(const RgbImage& in, int out_height) {
  const Taps taps = ComputeTaps(in.height, out_height);
  RgbImage out(in.width, out_height);
  for (int y = 0; y < out_height; ++y) {
    const int32_t* k = &taps.weights[static_cast<size_t>(y) * taps.max_taps];
    for (int x = 0; x < in.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        int64_t acc = int64_t{1} << (kPrecisionBits - 1);
        for (int t = 0; t < taps.count[y]; ++t) acc += int64_t{in.at(x, taps.first[y] + t)[c]} * k[t];
        out.at(x, y)[c] = ClampFixed(acc);
      }
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ResizedSize> SmartResize(int height, int width, int factor, int64_t min_pixels,
                                        int64_t max_pixels) {
  if (height <= 0 || width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image size ", width, "x", height, " must be positive"));
  }
  if (factor <= 0 || min_pixels > max_pixels) {
    return absl::InvalidArgumentError(absl::StrCat("smart resize: bad factor ", factor,
                                                   " or min_pixels ", min_pixels,
                                                   " > max_pixels ", max_pixels));
  }
  const double ratio = static_cast<double>(std::max(height, width)) / std::min(height, width);
  if (ratio > 200.0) {
    return absl::InvalidArgumentError(absl::StrCat("image ", width, "x", height,
                                                   ": aspect ratio ", ratio,
                                                   " exceeds the limit of 200"));
  }
  const double f = factor;
  int64_t h_bar = static_cast<int64_t>(PyRound(height / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(PyRound(width / f)) * factor;
  const double area = static_cast<double>(height) * static_cast<double>(width);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h_bar = static_cast<int64_t>(std::floor(height / beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::floor(width / beta / f)) * factor;
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h_bar = static_cast<int64_t>(std::ceil(height * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(width * beta / f)) * factor;
  }
  if (h_bar <= 0 || w_bar <= 0 || h_bar > (1 << 30) || w_bar > (1 << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("image ", width, "x", height, ": smart resize to ", w_bar, "x", h_bar,
                     " (min_pixels ", min_pixels, ", max_pixels ", max_pixels,
                     ") leaves no valid size; raise max_pixels"));
  }
  return ResizedSize{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

RgbImage ResizeBicubic(const RgbImage& image, int out_width, int out_height) {
  // Pillow skips a pass whose size does not change. Since Pillow 13 it runs the vertical pass
  // first when the height loses more than twice as many pixels as the width does (so that the
  // horizontal pass has fewer rows), else the horizontal one first. The order changes the
  // result by up to a few levels, since each pass rounds to 8 bits.
  const int dh = image.height - out_height, dw = image.width - out_width;
  const bool vertical_first = dh > 0 && dh > 2 * dw;
  RgbImage out = image;
  for (int pass = 0; pass < 2; ++pass) {
    const bool vertical = (pass == 0) == vertical_first;
    if (vertical && out.height != out_height) out = ResizeVertical(out, out_height);
    if (!vertical && out.width != out_width) out = ResizeHorizontal(out, out_width);
  }
  return out;
}

int64_t NumImageTokens(const std::array<int64_t, 3>& grid_thw, int merge_size) {
  return grid_thw[0] * grid_thw[1] * grid_thw[2] / (int64_t{merge_size} * merge_size);
}

ImagePatches Patchify(const std::vector<float>& frames, int num_frames, int height, int width,
                      const PreprocessConfig& config) {
  const int p = config.patch_size, m = config.merge_size, tp = config.temporal_patch_size;
  constexpr int kC = 3;
  const int gh = height / p, gw = width / p, gt = num_frames / tp;
  const size_t frame_size = static_cast<size_t>(kC) * height * width;
  // Broken invariants are programming errors (PreprocessImage guarantees them): fail loudly.
  DHP_CHECK(num_frames % tp == 0 && height % (p * m) == 0 && width % (p * m) == 0 &&
            frames.size() == frame_size * num_frames)
      << "Patchify: bad input " << num_frames << " frames of " << width << "x" << height << ", "
      << frames.size() << " values";
  ImagePatches out;
  out.patch_dim = config.patch_dim();
  out.num_patches = int64_t{gt} * gh * gw;
  out.grid_thw = {gt, gh, gw};
  out.values.resize(static_cast<size_t>(out.num_patches) * out.patch_dim);
  float* dst = out.values.data();
  // Output order (t, gh/m, gw/m, m, m) over patches; (C, Tp, p, p) within a patch.
  for (int t = 0; t < gt; ++t) {
    for (int bh = 0; bh < gh / m; ++bh) {
      for (int bw = 0; bw < gw / m; ++bw) {
        for (int mh = 0; mh < m; ++mh) {
          for (int mw = 0; mw < m; ++mw) {
            const int row0 = (bh * m + mh) * p, col0 = (bw * m + mw) * p;
            for (int c = 0; c < kC; ++c) {
              for (int f = 0; f < tp; ++f) {
                const float* plane =
                    frames.data() + (t * tp + f) * frame_size + static_cast<size_t>(c) * height * width;
                for (int y = 0; y < p; ++y) {
                  const float* src = plane + static_cast<size_t>(row0 + y) * width + col0;
                  dst = std::copy(src, src + p, dst);
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

absl::StatusOr<ImagePatches> PreprocessImage(const RgbImage& image,
                                             const PreprocessConfig& config) {
  absl::StatusOr<ResizedSize> size = SmartResize(image.height, image.width, config.factor(),
                                                 config.min_pixels, config.max_pixels);
  if (!size.ok()) return size.status();
  const RgbImage resized = ResizeBicubic(image, size->width, size->height);
  const int h = size->height, w = size->width, tp = config.temporal_patch_size;
  const size_t plane = static_cast<size_t>(h) * w;
  std::vector<float> frames(static_cast<size_t>(tp) * 3 * plane);
  // Rescale in double then round to float, normalise in float: numpy's order of operations in
  // the Hugging Face processor (rescale upcasts to float64, casts to float32; normalize is float32).
  const double rescale = 1.0 / 255.0;
  for (int c = 0; c < 3; ++c) {
    float* dst = frames.data() + c * plane;
    for (size_t i = 0; i < plane; ++i) {
      const float v = static_cast<float>(resized.pixels[i * 3 + c] * rescale);
      dst[i] = (v - config.mean[c]) / config.std[c];
    }
  }
  const size_t frame_size = 3 * plane;
  for (int f = 1; f < tp; ++f) {
    std::copy(frames.begin(), frames.begin() + frame_size, frames.begin() + f * frame_size);
  }
  return Patchify(frames, tp, h, w, config);
}

}  // namespace data
}  // namespace dhp
