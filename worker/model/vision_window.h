// Index bookkeeping of the Qwen2.5-VL vision tower for a packed sequence of images: the window
// permutation (as Hugging Face's get_window_index), its inverse, the attention segment bounds
// for window and full-attention blocks, and the 2-D rotary positions of every patch.
//
// Pure C++ (no LibTorch) so that sequence-parallel code can split the patch sequence at window
// boundaries and tests run in milliseconds. Stateless and thread-safe.
//
// Terms: a *patch* is one row of the pixel input ([N, 1176]); a *unit* is a 2x2 group of patches
// (spatial_merge_size^2), stored consecutively in the input (merge-block order) and merged into
// one text token; a *window* is up to 4x4 units (window_size 112 px) of one frame.
#ifndef DHP_WORKER_MODEL_VISION_WINDOW_H_
#define DHP_WORKER_MODEL_VISION_WINDOW_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"

namespace dhp {

// One image's (or video's) grid in patches: t frames (after temporal patching), h rows, w columns.
struct GridThw {
  int64_t t = 1;
  int64_t h = 0;
  int64_t w = 0;
  int64_t patches() const { return t * h * w; }
  bool operator==(const GridThw& o) const { return t == o.t && h == o.h && w == o.w; }
};

struct VisionWindowPlan {
  int64_t num_patches = 0;  // N = sum of t*h*w
  int64_t num_units = 0;    // N / 4
  // window_index[i] = the unit (in input order) at position i of the window order. [N/4]
  std::vector<int64_t> window_index;
  // reverse_index = argsort(window_index): unit u's position in the window order. [N/4]
  std::vector<int64_t> reverse_index;
  // Segment bounds in patches, in window order, starting at 0 and ending at N, strictly increasing
  // (empty windows dropped). Window-attention blocks attend within these.
  std::vector<int64_t> cu_window_seqlens;
  // One segment per frame (t segments per image), in patches. Full-attention blocks attend within
  // these. Frames are contiguous in both orders, so this holds for the window order too.
  std::vector<int64_t> cu_seqlens;
  // 2-D rotary position (row, col) in patches within its frame, per patch in WINDOW order. [N]
  std::vector<std::array<int64_t, 2>> rope_pos;
  int64_t max_grid_side = 0;  // max over images of max(h, w): size of the rotary table
};

// Builds the plan. InvalidArgument (naming the image index) when a grid is empty or its h or w is
// not a multiple of spatial_merge_size.
absl::StatusOr<VisionWindowPlan> MakeVisionWindowPlan(const std::vector<GridThw>& grids,
                                                      const VisionConfig& config);

// Number of merged tokens (<|image_pad|> slots) of one grid: t*h*w / merge^2.
int64_t MergedTokens(const GridThw& grid, const VisionConfig& config);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_VISION_WINDOW_H_
