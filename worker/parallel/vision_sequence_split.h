// How Ulysses sequence parallelism splits the vision tower's packed patch sequence over the
// ranks of one SP group, and the segment bookkeeping each rank needs. Pure C++ (no LibTorch), so
// the arithmetic is tested in milliseconds and shared by the Ulysses tower, the spec validation
// and the benchmarks. Stateless and thread-safe.
//
// The sequence is the WINDOW order of a VisionWindowPlan (vision_window.h): windows of one frame
// are consecutive, frames of one image are consecutive, images follow each other. Rank r of an SP
// group of size P owns the contiguous run of patches [cuts[r], cuts[r+1]), a run of WHOLE windows:
//
//   cuts[0] = 0, cuts[P] = N, and for k = 1..P-1 cuts[k] is the window boundary (an entry of
//   plan.cu_window_seqlens) nearest to the ideal cut N*k/P. Ties (two boundaries equally far)
//   go to the LOWER boundary, so the earlier rank gets the smaller run. Distances are compared
//   exactly in integers (|b*P - N*k|), never in floating point.
//
// Consequences (checked by the tests):
//  - no window is cut, so window-attention blocks run purely locally;
//  - every cut is a multiple of the merge unit (4 patches): window boundaries are, because windows
//    hold whole merged units; the merger therefore runs locally on each run (Split asserts it);
//  - balance: |cuts[k] - N*k/P| <= (longest window)/2, so every run is within one (longest)
//    window of the ideal N/P;
//  - cuts are non-decreasing; a rank whose two cuts coincide owns an EMPTY run (0 windows).
//    This happens when there are fewer windows than ranks (e.g. 2 windows over 4 ranks) or when
//    one window is longer than N/P. Empty ranks still take part in every collective (in the
//    full-attention blocks they receive their heads of the whole sequence and do real work);
//  - frames (full-attention segments) may span several ranks. Ulysses does not split a
//    frame's attention: after the sequence<->heads all-to-all every rank holds the WHOLE sequence
//    (the runs concatenated in rank order = the window order) for H/P heads, and attends within
//    the global frame bounds `cu_seqlens`. The per-rank frame pieces are recorded for logs and
//    for schemes that attend locally.
#ifndef DHP_WORKER_PARALLEL_VISION_SEQUENCE_SPLIT_H_
#define DHP_WORKER_PARALLEL_VISION_SEQUENCE_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/vision_window.h"

namespace dhp {

// The run of one rank. Patch indices are in the window order of the whole sequence.
struct VisionRankRun {
  int64_t patch_begin = 0;   // first patch (global, window order)
  int64_t patch_end = 0;     // one past the last
  int64_t window_begin = 0;  // first window (index into the plan's windows, window order)
  int64_t window_end = 0;    // one past the last
  // Window bounds relative to patch_begin: {0, ..., patches()}; {0} for an empty run.
  std::vector<int64_t> cu_window_seqlens;
  // Pieces of frames (full-attention segments) inside the run, relative to patch_begin:
  // {0, ..., patches()}; {0} for an empty run. frame_of_piece[i] is the global frame index of
  // piece i (a frame cut by this run's edges appears as a piece on each rank holding part of it).
  std::vector<int64_t> cu_frame_pieces;
  std::vector<int64_t> frame_of_piece;

  int64_t patches() const { return patch_end - patch_begin; }
  int64_t windows() const { return window_end - window_begin; }
  bool empty() const { return patch_end == patch_begin; }
};

struct VisionSequenceSplit {
  int sp = 1;                             // P
  int64_t num_patches = 0;                // N
  int64_t merge_unit = 4;                 // patches per merged token (spatial_merge_size^2)
  std::vector<int64_t> cuts;              // P + 1 patch offsets (see the header comment)
  std::vector<int64_t> patches_per_rank;  // cuts[r+1] - cuts[r]: the all-to-all gather sizes
  std::vector<int64_t> units_per_rank;    // patches_per_rank / merge_unit: merged tokens per rank
  std::vector<VisionRankRun> runs;        // one per rank
  // Frame bounds of the whole sequence (= plan.cu_seqlens): what the full-attention blocks attend
  // within after the all-to-all gathered the sequence.
  std::vector<int64_t> cu_seqlens;
  // For each frame, the first and last rank holding any of its patches (first == last when the
  // frame lies on one rank).
  std::vector<int> frame_first_rank;
  std::vector<int> frame_last_rank;

  const VisionRankRun& run(int rank) const { return runs[rank]; }
  // Merged tokens before rank r's (the offset of its slice of the merged output, window order).
  int64_t UnitOffset(int rank) const;
  int64_t max_units() const;  // the largest units_per_rank entry (all-gather padding)
};

// InvalidArgument when sp < 1, merge_unit < 1, or the plan is inconsistent (bounds not starting
// at 0 / ending at N / strictly increasing). A window boundary that is not a multiple of
// merge_unit, or a frame boundary that is not a window boundary, is a broken invariant of
// MakeVisionWindowPlan and crashes (CHECK).
absl::StatusOr<VisionSequenceSplit> SplitVisionSequence(const VisionWindowPlan& plan, int sp,
                                                        int64_t merge_unit);

// The rows of the merged output ([N/4, out], INPUT order) that rank `rank` computes: its run's
// units, plan.window_index[UnitOffset(rank) .. + units_per_rank[rank]), in window order. The
// hand-off needs them: with UlyssesOutputGrad::kReplicated the backward reads only these rows of
// the upstream gradient, so a text rank may send a vision rank just these rows.
std::vector<int64_t> OwnedMergedRows(const VisionWindowPlan& plan,
                                     const VisionSequenceSplit& split, int rank);

}  // namespace dhp

#endif  // DHP_WORKER_PARALLEL_VISION_SEQUENCE_SPLIT_H_
