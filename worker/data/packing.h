// Packing several training samples into one sequence, with what the model needs to keep them
// independent: per-sample token boundaries (cu_seqlens, for block-diagonal causal attention),
// images concatenated in order with their grids, and 3-D M-RoPE position ids that restart at 0
// for each sample.
//
// M-RoPE positions follow Hugging Face's Qwen2.5-VL get_rope_index for still images: text tokens
// get the same running position on all three axes; an image's merged tokens get
// (t, row, col) of its merged grid (gh/2 x gw/2) plus the position where the image starts; the
// text after it resumes at the largest position so far + 1. (For still images the temporal index
// is 0: Hugging Face scales it by second_per_grid_t, which is 0 for images.)
//
// Labels stay aligned with input_ids (the loss shifts by one). A sample's first label is always
// -100 (it starts with <|im_start|>), so the shift never trains across a sample boundary.
//
// Thread-safety: pure functions and plain structs.
#ifndef DHP_WORKER_DATA_PACKING_H_
#define DHP_WORKER_DATA_PACKING_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/sample_builder.h"

namespace dhp {
namespace data {

struct PackedSequence {
  std::vector<int64_t> input_ids;   // [S]
  std::vector<int64_t> labels;      // [S]
  std::vector<int64_t> cu_seqlens;  // [num_samples + 1]: sample k is tokens [cu[k], cu[k+1])
  std::vector<int64_t> position_ids;  // [3, S] row-major: axis t, then h, then w

  std::vector<float> pixel_values;  // [num_patches, patch_dim], images in token order
  int64_t num_patches = 0;
  int64_t patch_dim = 0;
  std::vector<std::array<int64_t, 3>> image_grid_thw;  // [num_images] (t, h, w) in patches
  std::vector<int64_t> image_sample;                   // [num_images] sample index of each image

  std::vector<std::string> sample_locations;  // [num_samples] file:line, for logs

  int64_t num_tokens() const { return static_cast<int64_t>(input_ids.size()); }
  int64_t num_samples() const { return static_cast<int64_t>(sample_locations.size()); }
};

struct PackingOptions {
  int64_t max_tokens = 4096;  // per packed sequence
  int64_t max_patches = 0;    // per packed sequence; 0: no limit
  int64_t image_pad_id = -1;  // <|image_pad|>, to check each image's token run
  int spatial_merge_size = 2;
};

// M-RoPE position ids [3, S] of one sample. Errors: the <|image_pad|> runs do not match the
// grids (count or length).
absl::StatusOr<std::vector<int64_t>> MropePositions(
    const std::vector<int64_t>& input_ids, const std::vector<std::array<int64_t, 3>>& grids,
    int64_t image_pad_id, int spatial_merge_size);

// Packs samples greedily in the given order: a sample goes into the current sequence if it fits
// (tokens and patches), otherwise it starts a new one. Errors: a sample that alone exceeds the
// limits (naming it), image token runs that do not match the grids.
absl::StatusOr<std::vector<PackedSequence>> PackSamples(std::vector<TrainingSample> samples,
                                                        const PackingOptions& options);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_PACKING_H_
