// Synthetic batches are a pure function of (preset, grids, seed): the pixels are the values
// at::manual_seed(1000 + seed) then randn would give, but drawn from a generator of their own,
// so LibTorch's default generator is left as it was and rank threads may build batches at once.
#include "worker/rank/synthetic_batch.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "common/model_presets.h"
#include "worker/comm/rank_threads.h"

namespace dhp {
namespace {

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

std::vector<GridThw> Grids() {
  const int64_t m = Tiny().vision.spatial_merge_size;
  return {{1, 2 * m, 3 * m}, {1, 2 * m, 2 * m}};
}

TEST(SyntheticBatchTest, PixelsAreTheSeededValuesAndTheDefaultGeneratorIsUntouched) {
  const int64_t m = Tiny().vision.spatial_merge_size;
  at::manual_seed(1000 + 5);
  const at::Tensor expected = at::randn({(2 * 3 + 2 * 2) * m * m, 1176});  // the grids' patches

  at::manual_seed(99);
  const at::Tensor first_draw = at::randn({16});
  at::manual_seed(99);
  const PackedBatch b = MakeSyntheticBatch(Tiny(), Grids(), 5);
  const at::Tensor after = at::randn({16});

  EXPECT_TRUE(at::equal(b.pixel_values, expected));
  EXPECT_TRUE(at::equal(after, first_draw)) << "the default generator was reseeded or advanced";
}

TEST(SyntheticBatchTest, RankThreadsBuildingBatchesAtOnceGetTheSerialValues) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 20;
  std::vector<at::Tensor> serial;
  for (int s = 0; s < kRounds; ++s) {
    serial.push_back(MakeSyntheticBatch(Tiny(), Grids(), s).pixel_values);
  }
  std::vector<int> mismatches(kThreads, 0);
  comm::RunRanks(kThreads, [&](int rank) {
    for (int s = 0; s < kRounds; ++s) {
      const PackedBatch b = MakeSyntheticBatch(Tiny(), Grids(), s);
      if (!at::equal(b.pixel_values, serial[s])) ++mismatches[rank];
    }
  });
  for (int r = 0; r < kThreads; ++r) EXPECT_EQ(mismatches[r], 0) << "thread " << r;
}

}  // namespace
}  // namespace dhp
