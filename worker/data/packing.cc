#include "worker/data/packing.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dhp {
namespace data {

absl::StatusOr<std::vector<int64_t>> MropePositions(
    const std::vector<int64_t>& input_ids, const std::vector<std::array<int64_t, 3>>& grids,
    int64_t image_pad_id, int spatial_merge_size) {
  const size_t n = input_ids.size();
  std::vector<int64_t> pos(3 * n);
  int64_t* t_pos = pos.data();
  int64_t* h_pos = pos.data() + n;
  int64_t* w_pos = pos.data() + 2 * n;
  int64_t next = 0;  // position of the next text token
  size_t image = 0;
  for (size_t i = 0; i < n;) {
    if (input_ids[i] != image_pad_id) {
      t_pos[i] = h_pos[i] = w_pos[i] = next++;
      ++i;
      continue;
    }
    if (image >= grids.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("image token run at position ", i, " has no grid (", grids.size(),
                       " grids given)"));
    }
    const std::array<int64_t, 3>& g = grids[image];
    const int64_t gt = g[0], gh = g[1] / spatial_merge_size, gw = g[2] / spatial_merge_size;
    const size_t run = static_cast<size_t>(gt * gh * gw);
    size_t end = i;
    while (end < n && input_ids[end] == image_pad_id) ++end;
    if (end - i != run) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image ", image, ": ", end - i, " image tokens at position ", i, " but its grid (", g[0],
          ", ", g[1], ", ", g[2], ") needs ", run));
    }
    const int64_t start = next;
    size_t k = i;
    for (int64_t t = 0; t < gt; ++t) {
      for (int64_t r = 0; r < gh; ++r) {
        for (int64_t c = 0; c < gw; ++c, ++k) {
          t_pos[k] = start;  // still images: temporal index 0 (see the header)
          h_pos[k] = start + r;
          w_pos[k] = start + c;
        }
      }
    }
    next = start + std::max<int64_t>({gh - 1, gw - 1, 0}) + 1;
    i = end;
    ++image;
  }
  if (image != grids.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(grids.size(), " image grids but ", image, " image token runs"));
  }
  return pos;
}

namespace {

struct Builder {
  PackedSequence seq;
  std::vector<int64_t> axes[3];

  bool empty() const { return seq.input_ids.empty(); }

  PackedSequence Finish() {
    seq.position_ids.clear();
    for (auto& a : axes) seq.position_ids.insert(seq.position_ids.end(), a.begin(), a.end());
    PackedSequence out = std::move(seq);
    *this = Builder();
    return out;
  }
};

}  // namespace

absl::StatusOr<std::vector<PackedSequence>> PackSamples(std::vector<TrainingSample> samples,
                                                        const PackingOptions& options) {
  std::vector<PackedSequence> out;
  Builder cur;
  int64_t cur_patches = 0;
  for (TrainingSample& s : samples) {
    const int64_t tokens = static_cast<int64_t>(s.input_ids.size());
    int64_t patches = 0;
    std::vector<std::array<int64_t, 3>> grids;
    for (const ImagePatches& img : s.images) {
      patches += img.num_patches;
      grids.push_back(img.grid_thw);
    }
    if (tokens > options.max_tokens ||
        (options.max_patches > 0 && patches > options.max_patches)) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.location, ": sample has ", tokens, " tokens and ", patches,
          " image patches; a packed sequence holds at most ", options.max_tokens, " tokens",
          options.max_patches > 0 ? absl::StrCat(" and ", options.max_patches, " patches") : ""));
    }
    if (!grids.empty() && options.image_pad_id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(s.location, ": PackingOptions.image_pad_id is not set"));
    }
    if (s.labels.size() != s.input_ids.size()) {
      return absl::InvalidArgumentError(absl::StrCat(s.location, ": labels and input_ids differ in length"));
    }
    absl::StatusOr<std::vector<int64_t>> pos =
        MropePositions(s.input_ids, grids, options.image_pad_id, options.spatial_merge_size);
    if (!pos.ok()) {
      return absl::Status(pos.status().code(), absl::StrCat(s.location, ": ", pos.status().message()));
    }
    if (!cur.empty() && (cur.seq.num_tokens() + tokens > options.max_tokens ||
                         (options.max_patches > 0 && cur_patches + patches > options.max_patches))) {
      out.push_back(cur.Finish());
      cur_patches = 0;
    }
    PackedSequence& seq = cur.seq;
    if (seq.cu_seqlens.empty()) seq.cu_seqlens.push_back(0);
    const int64_t sample_index = static_cast<int64_t>(seq.sample_locations.size());
    seq.input_ids.insert(seq.input_ids.end(), s.input_ids.begin(), s.input_ids.end());
    seq.labels.insert(seq.labels.end(), s.labels.begin(), s.labels.end());
    seq.cu_seqlens.push_back(static_cast<int64_t>(seq.input_ids.size()));
    for (int axis = 0; axis < 3; ++axis) {
      cur.axes[axis].insert(cur.axes[axis].end(), pos->begin() + axis * tokens,
                            pos->begin() + (axis + 1) * tokens);
    }
    for (ImagePatches& img : s.images) {
      if (seq.patch_dim == 0) seq.patch_dim = img.patch_dim;
      if (img.patch_dim != seq.patch_dim) {
        return absl::InvalidArgumentError(absl::StrCat(s.location, ": patch size ", img.patch_dim,
                                                       " differs from ", seq.patch_dim));
      }
      seq.pixel_values.insert(seq.pixel_values.end(), img.values.begin(), img.values.end());
      seq.num_patches += img.num_patches;
      seq.image_grid_thw.push_back(img.grid_thw);
      seq.image_sample.push_back(sample_index);
      std::vector<float>().swap(img.values);  // release the copy's source early
    }
    seq.sample_locations.push_back(s.location);
    cur_patches += patches;
  }
  if (!cur.empty()) out.push_back(cur.Finish());
  return out;
}

}  // namespace data
}  // namespace dhp
