#include "worker/parallel/vision_sequence_split.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace dhp {
namespace {

// Broken invariant of the window plan: crash loudly.
void Check(bool ok, const char* what, int64_t value) {
  DHP_CHECK(ok) << "dhp vision sequence split: " << what << " (value " << value << ")";
}

absl::Status CheckBounds(const std::vector<int64_t>& b, int64_t n, const char* field) {
  if (b.empty() || b.front() != 0 || b.back() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vision window plan: ", field, " must run from 0 to num_patches = ", n, ", got ",
        b.empty() ? std::string("an empty list") : absl::StrCat(b.front(), "..", b.back())));
  }
  for (size_t i = 1; i < b.size(); ++i) {
    if (b[i] <= b[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("vision window plan: ", field, "[", i,
                                                     "] = ", b[i], " is not above ", b[i - 1]));
    }
  }
  return absl::OkStatus();
}

// Index of the boundary in `bounds` nearest to N*k/P; the lower one on a tie.
size_t NearestBoundary(const std::vector<int64_t>& bounds, int64_t n, int64_t k, int64_t p) {
  const int64_t target = n * k;  // compare bounds[i]*p against n*k
  // First boundary with bounds[i]*p >= target.
  auto it = std::lower_bound(bounds.begin(), bounds.end(), target,
                             [p](int64_t b, int64_t t) { return b * p < t; });
  size_t hi = static_cast<size_t>(it - bounds.begin());
  if (hi == 0) return 0;
  if (hi == bounds.size()) return bounds.size() - 1;
  const size_t lo = hi - 1;
  const int64_t d_lo = target - bounds[lo] * p;
  const int64_t d_hi = bounds[hi] * p - target;
  return d_hi < d_lo ? hi : lo;
}

// Bounds of `global` inside [begin, end], relative to begin, with the index of each piece's
// segment (the segment containing the piece's first patch).
void ClipSegments(const std::vector<int64_t>& global, int64_t begin, int64_t end,
                  std::vector<int64_t>* cu, std::vector<int64_t>* owner) {
  cu->assign(1, 0);
  if (owner != nullptr) owner->clear();
  if (begin == end) return;
  // Segment containing `begin`: the last bound <= begin.
  size_t seg =
      static_cast<size_t>(std::upper_bound(global.begin(), global.end(), begin) - global.begin()) -
      1;
  int64_t pos = begin;
  while (pos < end) {
    const int64_t stop = std::min(global[seg + 1], end);
    cu->push_back(stop - begin);
    if (owner != nullptr) owner->push_back(static_cast<int64_t>(seg));
    pos = stop;
    ++seg;
  }
}

}  // namespace

int64_t VisionSequenceSplit::UnitOffset(int rank) const {
  int64_t off = 0;
  for (int r = 0; r < rank; ++r) off += units_per_rank[r];
  return off;
}

int64_t VisionSequenceSplit::max_units() const {
  int64_t m = 0;
  for (int64_t u : units_per_rank) m = std::max(m, u);
  return m;
}

std::vector<int64_t> OwnedMergedRows(const VisionWindowPlan& plan,
                                     const VisionSequenceSplit& split, int rank) {
  const int64_t begin = split.UnitOffset(rank);
  return std::vector<int64_t>(plan.window_index.begin() + begin,
                              plan.window_index.begin() + begin + split.units_per_rank[rank]);
}

absl::StatusOr<VisionSequenceSplit> SplitVisionSequence(const VisionWindowPlan& plan, int sp,
                                                        int64_t merge_unit) {
  if (sp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vision sequence-parallel degree: ", sp, " must be at least 1"));
  }
  if (merge_unit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vision merge unit: ", merge_unit, " must be at least 1"));
  }
  const int64_t n = plan.num_patches;
  if (absl::Status s = CheckBounds(plan.cu_window_seqlens, n, "cu_window_seqlens"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckBounds(plan.cu_seqlens, n, "cu_seqlens"); !s.ok()) return s;
  const std::vector<int64_t>& wb = plan.cu_window_seqlens;
  for (int64_t b : wb) Check(b % merge_unit == 0, "window boundary cuts a merged unit", b);
  for (int64_t b : plan.cu_seqlens) {
    Check(std::binary_search(wb.begin(), wb.end(), b), "frame boundary inside a window", b);
  }

  VisionSequenceSplit split;
  split.sp = sp;
  split.num_patches = n;
  split.merge_unit = merge_unit;
  split.cu_seqlens = plan.cu_seqlens;
  std::vector<size_t> cut_window(sp + 1, 0);  // cut k as an index into wb
  cut_window[sp] = wb.size() - 1;
  for (int k = 1; k < sp; ++k) cut_window[k] = NearestBoundary(wb, n, k, sp);
  for (int k = 0; k <= sp; ++k) split.cuts.push_back(wb[cut_window[k]]);

  for (int r = 0; r < sp; ++r) {
    VisionRankRun run;
    run.patch_begin = split.cuts[r];
    run.patch_end = split.cuts[r + 1];
    Check(run.patch_end >= run.patch_begin, "cuts decrease", run.patch_end);
    Check(run.patch_begin % merge_unit == 0, "cut inside a merged unit", run.patch_begin);
    run.window_begin = static_cast<int64_t>(cut_window[r]);
    run.window_end = static_cast<int64_t>(cut_window[r + 1]);
    ClipSegments(wb, run.patch_begin, run.patch_end, &run.cu_window_seqlens, nullptr);
    Check(static_cast<int64_t>(run.cu_window_seqlens.size()) - 1 == run.windows(),
          "a run's windows are not whole", r);
    ClipSegments(plan.cu_seqlens, run.patch_begin, run.patch_end, &run.cu_frame_pieces,
                 &run.frame_of_piece);
    split.patches_per_rank.push_back(run.patches());
    split.units_per_rank.push_back(run.patches() / merge_unit);
    split.runs.push_back(std::move(run));
  }

  const size_t frames = plan.cu_seqlens.size() - 1;
  split.frame_first_rank.assign(frames, -1);
  split.frame_last_rank.assign(frames, -1);
  for (int r = 0; r < sp; ++r) {
    for (int64_t f : split.runs[r].frame_of_piece) {
      if (split.frame_first_rank[f] < 0) split.frame_first_rank[f] = r;
      split.frame_last_rank[f] = r;
    }
  }
  return split;
}

}  // namespace dhp
