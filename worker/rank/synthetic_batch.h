// Synthetic packed batches for tests, benchmarks and dhp-rank smoke runs: one sample per image
// grid, [im_start, two prompt tokens, vision_start, image pads, vision_end, answer, im_end],
// labels only on the answer and im_end, random pixels. Deterministic in `seed`. Thread-safe
// apart from seeding LibTorch's global generator.
#ifndef DHP_WORKER_RANK_SYNTHETIC_BATCH_H_
#define DHP_WORKER_RANK_SYNTHETIC_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/vision_window.h"

namespace dhp {

// Answers are 6 + (sample index % 3) tokens. Position ids are left empty (the model computes
// them); pixels are randn from a CPU generator of their own seeded 1000 + seed (the values
// at::manual_seed(1000 + seed) gives; the default generator is left alone, so rank threads may
// build batches concurrently).
PackedBatch MakeSyntheticBatch(const ModelPreset& preset, const std::vector<GridThw>& grids,
                               int64_t seed);

// The same with its M-RoPE position ids filled in (ComputePositionIds), as the ranks use it.
absl::StatusOr<PackedBatch> MakePositionedSyntheticBatch(const ModelPreset& preset,
                                                         const std::vector<GridThw>& grids,
                                                         int64_t seed);

// A copy of `batch` whose tensors are on `device`, pixels in `pixel_dtype` (tests that run the
// model on a GPU or in bf16).
PackedBatch BatchOnDevice(const PackedBatch& batch, const at::Device& device,
                          at::ScalarType pixel_dtype = at::kFloat);

// The device tests run on: $DHP_TEST_DEVICE ("cuda", "cuda:1", ...; tools/gpu-check.sh sets it),
// else the CPU.
at::Device TestDeviceFromEnv();

}  // namespace dhp

#endif  // DHP_WORKER_RANK_SYNTHETIC_BATCH_H_
