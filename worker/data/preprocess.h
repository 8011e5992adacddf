// Qwen2.5-VL image preprocessing: smart resize to multiples of 28 within [min_pixels,
// max_pixels], bicubic resampling, rescale by 1/255, CLIP mean/std normalisation, repetition of a
// still image to the temporal patch size, and patchify to [t*gh*gw, C*2*14*14] in merge-block
// order, as Hugging Face's (slow, PIL-based) Qwen2VLImageProcessor does.
//
// Bicubic: `ResizeBicubic` reimplements Pillow's separable resampling for 8-bit images (cubic
// kernel a = -0.5, support widened by the scale when downsampling, i.e. antialiased; pixel-centre
// alignment; 22-bit fixed-point weights; horizontal pass, then vertical; each pass rounds and
// clamps to uint8), which is what the Hugging Face processor calls through PIL before it
// rescales. Pillow 13 runs the vertical pass first when the height loses more than twice as many
// pixels as the width; ResizeBicubic does too. The whole pipeline is bit-identical to Hugging
// Face's PIL processor with Pillow 13.0.0 on 24 images of every kind
// (tests/hf_preprocess_parity.py, run by tools/test.sh), and a golden test pins Pillow 9.4's
// values where the two agree. The torchvision-based "fast" Hugging Face processor differs by a
// few grey levels; we follow the slow, PIL-based one.
//
// Thread-safety: pure functions; no shared state.
#ifndef DHP_WORKER_DATA_PREPROCESS_H_
#define DHP_WORKER_DATA_PREPROCESS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/image_io.h"

namespace dhp {
namespace data {

struct PreprocessConfig {
  int patch_size = 14;
  int merge_size = 2;
  int temporal_patch_size = 2;
  int64_t min_pixels = 56 * 56;     // 3136, the processor default
  int64_t max_pixels = 12845056;    // the Qwen2.5-VL preprocessor_config.json default
  std::array<float, 3> mean = {0.48145466f, 0.4578275f, 0.40821073f};   // OpenAI CLIP
  std::array<float, 3> std = {0.26862954f, 0.26130258f, 0.27577711f};  // OpenAI CLIP

  int factor() const { return patch_size * merge_size; }
  int patch_dim() const { return 3 * temporal_patch_size * patch_size * patch_size; }
};

struct ResizedSize {
  int height = 0;
  int width = 0;
};

// Hugging Face's smart_resize: both sides become multiples of `factor`, the area lands in
// [min_pixels, max_pixels] and the aspect ratio is kept as closely as possible. Rounding is
// Python's (round half to even). Errors: non-positive sizes, aspect ratio over 200, a side that
// would become 0.
absl::StatusOr<ResizedSize> SmartResize(int height, int width, int factor, int64_t min_pixels,
                                        int64_t max_pixels);

// Pillow-compatible bicubic resampling of an 8-bit RGB image (see the file comment).
RgbImage ResizeBicubic(const RgbImage& image, int out_width, int out_height);

// Flattened patches of one image (or video) with its grid.
struct ImagePatches {
  std::vector<float> values;  // [num_patches, patch_dim], merge-block order
  int64_t num_patches = 0;
  int64_t patch_dim = 0;                  // C * temporal_patch * patch * patch = 1176
  std::array<int64_t, 3> grid_thw = {0, 0, 0};  // (t, h/14, w/14)
};

// Number of <|image_pad|> tokens for a grid: t * h * w / merge_size^2.
int64_t NumImageTokens(const std::array<int64_t, 3>& grid_thw, int merge_size);

// Patchifies normalised frames. `frames` holds `num_frames` frames of [3, height, width] floats
// (channel-first), num_frames a multiple of temporal_patch_size, height and width multiples of
// patch_size * merge_size. The result is the reshape (t, Tp, C, gh/m, m, p, gw/m, m, p) permuted
// to (t, gh/m, gw/m, m, m, C, Tp, p, p) and flattened to [t*gh*gw, C*Tp*p*p].
ImagePatches Patchify(const std::vector<float>& frames, int num_frames, int height, int width,
                      const PreprocessConfig& config);

// The whole pipeline for a still image: smart resize, bicubic, rescale, normalise, repeat to
// temporal_patch_size frames, patchify. grid_thw = (1, h'/14, w'/14).
absl::StatusOr<ImagePatches> PreprocessImage(const RgbImage& image,
                                             const PreprocessConfig& config);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_PREPROCESS_H_
