// Test helpers for the parallel vision towers (Ulysses SP, vision TP): the tiny-preset tower and a
// packed batch of uneven images, single-rank references, and N ranks run as threads of one process
// over real Gloo groups (the worker/comm pattern: one InMemoryKvClient, one communicator and one
// CommStats per rank). Test-only.
//
// Thread-safety: the builders use the global RNG and must run on one thread (before RunRanks);
// RunRanks itself runs `body` concurrently, once per rank.
#ifndef DHP_WORKER_PARALLEL_VISION_PARALLEL_TEST_UTIL_H_
#define DHP_WORKER_PARALLEL_VISION_PARALLEL_TEST_UTIL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/comm_stats.h"
#include "worker/comm/communicator.h"
#include "worker/model/vision_model.h"
#include "worker/model/vision_window.h"

namespace dhp::testing {

const VisionConfig& TinyVision();

// The tiny tower with Hugging Face initialisation (std 0.05) from `seed`.
VisionTransformer MakeTinyVision(uint64_t seed);
// A fresh tower with the same parameter values as `src`.
VisionTransformer CloneVision(const VisionTransformer& src);

// Images of 224x224, 112x168 and 168x112 px (grids 16x16, 8x12, 12x8 patches: uneven windows of
// 64 and 32 patches) plus a 2-frame 112x112 video: 576 patches, 10 windows, 5 frames.
std::vector<GridThw> MixedGrids();

struct VisionBatch {
  std::vector<GridThw> grids;
  VisionWindowPlan plan;
  at::Tensor pixels;  // [N, 1176] ~ N(0, 1)
};
VisionBatch MakeVisionBatch(const std::vector<GridThw>& grids, uint64_t seed);

// Forward of the single-rank tower, then backward of sum(out * upstream). Returns out [N/4, out].
at::Tensor ReferenceForwardBackward(VisionTransformer& model, const VisionBatch& batch,
                                    const at::Tensor& upstream);

// name -> gradient (zeros where undefined), detached copies.
std::map<std::string, at::Tensor> GradsByName(const VisionTransformer& model);

// max |a - ref| / max |ref| (ref all zero: max |a - ref|).
double MaxRelDiff(const at::Tensor& a, const at::Tensor& ref);

// Runs body(rank, comm, stats) on `size` threads; each rank has a communicator of a group named
// `group` over real Gloo (size 1: LocalCommunicator) and its own CommStats. c10::Error thrown by
// body becomes a Status. Returns the first failure (by rank), or OK.
using RankBody =
    std::function<absl::Status(int rank, comm::Communicator& comm, comm::CommStats& stats)>;
absl::Status RunRanks(int size, const std::string& group, const RankBody& body);

}  // namespace dhp::testing

#endif  // DHP_WORKER_PARALLEL_VISION_PARALLEL_TEST_UTIL_H_
