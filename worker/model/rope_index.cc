#include "worker/model/rope_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dhp {

absl::StatusOr<std::vector<int64_t>> ComputeMropePositions(const std::vector<int64_t>& input_ids,
                                                           const std::vector<int64_t>& cu_seqlens,
                                                           const std::vector<GridThw>& image_grids,
                                                           const VisionConfig& vision,
                                                           const SpecialTokens& tokens) {
  const int64_t s_len = static_cast<int64_t>(input_ids.size());
  std::vector<int64_t> bounds = cu_seqlens;
  if (bounds.empty()) bounds = {0, s_len};
  if (bounds.front() != 0 || bounds.back() != s_len ||
      !std::is_sorted(bounds.begin(), bounds.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cu_seqlens must rise from 0 to the sequence length ", s_len, "; got ",
                     bounds.size(), " bounds from ", bounds.front(), " to ", bounds.back()));
  }
  const int64_t m = vision.spatial_merge_size;
  std::vector<int64_t> pos(3 * s_len, 0);
  auto set = [&](int64_t i, int64_t t, int64_t h, int64_t w) {
    pos[i] = t;
    pos[s_len + i] = h;
    pos[2 * s_len + i] = w;
  };
  size_t image = 0;
  for (size_t sample = 0; sample + 1 < bounds.size(); ++sample) {
    const int64_t end = bounds[sample + 1];
    int64_t next = 0;  // next text position in this sample (= max so far + 1)
    for (int64_t i = bounds[sample]; i < end;) {
      const int64_t id = input_ids[i];
      if (id == tokens.video_pad) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token ", i, " (sample ", sample, ") is <|video_pad|>: video input is not supported"));
      }
      if (id != tokens.image_pad) {
        set(i, next, next, next);
        ++next;
        ++i;
        continue;
      }
      int64_t run = 0;
      while (i + run < s_len && input_ids[i + run] == tokens.image_pad) ++run;
      if (image >= image_grids.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("sample ", sample, ": <|image_pad|> run at token ", i, " is image ", image,
                         " but only ", image_grids.size(), " image grids were given"));
      }
      const GridThw& g = image_grids[image];
      const int64_t gh = g.h / m, gw = g.w / m;
      const int64_t want = g.t * gh * gw;
      if (run != want || i + run > end) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sample ", sample, ": image ", image, " with grid (", g.t, ", ", g.h, ", ", g.w,
            ") needs ", want, " <|image_pad|> tokens inside its sample; found a run of ", run,
            " at token ", i, (i + run > end ? " crossing the sample's end" : "")));
      }
      int64_t max_pos = next - 1;
      for (int64_t t = 0, k = i; t < g.t; ++t) {
        for (int64_t r = 0; r < gh; ++r) {
          for (int64_t c = 0; c < gw; ++c, ++k) {
            set(k, next, next + r, next + c);  // temporal index is 0 for still images
            max_pos = std::max({max_pos, next + r, next + c});
          }
        }
      }
      next = max_pos + 1;
      i += run;
      ++image;
    }
  }
  if (image != image_grids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(image_grids.size(), " image grids given but ",
                                                   image, " <|image_pad|> runs found"));
  }
  return pos;
}

}  // namespace dhp
