// 3-D (t, h, w) position ids for M-RoPE over a packed text sequence, as Hugging Face's
// Qwen2.5-VL get_rope_index computes them for images, restarted at 0 for every packed sample.
//
// Text tokens get the same running index on all three axes. The <|image_pad|> run of an image
// with merged grid (t, gh, gw) gets (0, row, col) offset by the position where the run starts
// (Hugging Face multiplies the image's temporal index by 0 seconds per grid, so t is constant);
// text after the image resumes at the largest position so far + 1. Pure C++ (no LibTorch).
// Stateless and thread-safe.
#ifndef DHP_WORKER_MODEL_ROPE_INDEX_H_
#define DHP_WORKER_MODEL_ROPE_INDEX_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "worker/model/vision_window.h"

namespace dhp {

// input_ids: the packed sequence [S]. cu_seqlens: sample bounds (0 = first, S = last; empty
// means one sample). image_grids: the grids (in patches) of the images in the order their
// <|image_pad|> runs appear in the pack. Returns [3 * S], axis-major (t positions, then h,
// then w). InvalidArgument when a run's length differs from its image's merged token count, when
// a run crosses a sample boundary, when the grids run out or are left over, or on video tokens.
absl::StatusOr<std::vector<int64_t>> ComputeMropePositions(const std::vector<int64_t>& input_ids,
                                                           const std::vector<int64_t>& cu_seqlens,
                                                           const std::vector<GridThw>& image_grids,
                                                           const VisionConfig& vision,
                                                           const SpecialTokens& tokens);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_ROPE_INDEX_H_
