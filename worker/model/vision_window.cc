#include "worker/model/vision_window.h"

#include "absl/strings/str_cat.h"
#include "worker/model/model_config.h"

namespace dhp {

int64_t MergedTokens(const GridThw& grid, const VisionConfig& config) {
  return grid.patches() / MergeUnit(config);
}

absl::StatusOr<VisionWindowPlan> MakeVisionWindowPlan(const std::vector<GridThw>& grids,
                                                      const VisionConfig& config) {
  const int64_t m = config.spatial_merge_size;
  const int64_t unit = MergeUnit(config);
  const int64_t win = WindowUnits(config);
  if (m <= 0 || win <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision config: spatial_merge_size = ", m, ", window_size = ", config.window_size,
        ": need a positive merge size and at least one merged unit per window"));
  }
  VisionWindowPlan plan;
  plan.cu_window_seqlens.push_back(0);
  plan.cu_seqlens.push_back(0);
  for (size_t img = 0; img < grids.size(); ++img) {
    const GridThw& g = grids[img];
    if (g.t <= 0 || g.h <= 0 || g.w <= 0 || g.h % m != 0 || g.w % m != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("image ", img, ": grid (t, h, w) = (", g.t, ", ", g.h, ", ", g.w,
                       ") must be positive with h and w multiples of spatial_merge_size = ", m));
    }
    const int64_t uh = g.h / m, uw = g.w / m;  // grid in units
    // Hugging Face pads by `win - n % win`: a whole extra (empty) window when n divides.
    const int64_t nwh = (uh + win - uh % win) / win;
    const int64_t nww = (uw + win - uw % win) / win;
    const int64_t base = plan.num_units;  // first unit of this image
    for (int64_t t = 0; t < g.t; ++t) {
      for (int64_t wh = 0; wh < nwh; ++wh) {
        for (int64_t ww = 0; ww < nww; ++ww) {
          int64_t count = 0;
          for (int64_t r = wh * win; r < std::min(uh, (wh + 1) * win); ++r) {
            for (int64_t c = ww * win; c < std::min(uw, (ww + 1) * win); ++c) {
              const int64_t u = (t * uh + r) * uw + c;
              plan.window_index.push_back(base + u);
              // Patches of unit (r, c) in merge-block order: (dr, dc) in row-major.
              for (int64_t dr = 0; dr < m; ++dr) {
                for (int64_t dc = 0; dc < m; ++dc)
                  plan.rope_pos.push_back({r * m + dr, c * m + dc});
              }
              ++count;
            }
          }
          if (count > 0)
            plan.cu_window_seqlens.push_back(plan.cu_window_seqlens.back() + count * unit);
        }
      }
      plan.cu_seqlens.push_back(plan.cu_seqlens.back() + g.h * g.w);
    }
    plan.num_units += g.t * uh * uw;
    plan.max_grid_side = std::max({plan.max_grid_side, g.h, g.w});
  }
  plan.num_patches = plan.num_units * unit;
  plan.reverse_index.assign(plan.window_index.size(), 0);
  for (size_t i = 0; i < plan.window_index.size(); ++i)
    plan.reverse_index[plan.window_index[i]] = i;
  return plan;
}

}  // namespace dhp
