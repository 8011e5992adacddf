#include "worker/rank/synthetic_batch.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdlib>

namespace dhp {

PackedBatch MakeSyntheticBatch(const ModelPreset& preset, const std::vector<GridThw>& grids,
                               int64_t seed) {
  const SpecialTokens& tk = preset.tokens;
  const int64_t text_range = std::min<int64_t>(900, preset.text.vocab_size - 200);
  std::vector<int64_t> ids, labels, cu = {0};
  int64_t patches = 0;
  int64_t k = seed;
  for (const GridThw& g : grids) {
    for (int64_t t : std::vector<int64_t>{tk.im_start, 5 + k % 7, 6, tk.vision_start}) {
      ids.push_back(t);
    }
    for (int64_t i = 0; i < MergedTokens(g, preset.vision); ++i) ids.push_back(tk.image_pad);
    ids.push_back(tk.vision_end);
    const size_t prompt = ids.size();
    for (int64_t i = 0; i < 6 + k % 3; ++i) ids.push_back(100 + (13 * i + 7 * k) % text_range);
    ids.push_back(tk.im_end);
    labels.resize(prompt, -100);
    for (size_t i = prompt; i < ids.size(); ++i) labels.push_back(ids[i]);
    cu.push_back(static_cast<int64_t>(ids.size()));
    patches += g.t * g.h * g.w;
    ++k;
  }
  PackedBatch b;
  b.input_ids = at::tensor(ids);
  b.labels = at::tensor(labels);
  b.cu_seqlens = cu;
  b.image_grids = grids;
  // A generator of its own, seeded as at::manual_seed would seed the default one (the same
  // values): rank threads in one test process build batches at the same time, and the default
  // generator shared between them made the pixels depend on the threads' interleaving.
  at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(1000 + seed));
  b.pixel_values = at::randn({patches, 1176}, gen);
  return b;
}

absl::StatusOr<PackedBatch> MakePositionedSyntheticBatch(const ModelPreset& preset,
                                                         const std::vector<GridThw>& grids,
                                                         int64_t seed) {
  PackedBatch b = MakeSyntheticBatch(preset, grids, seed);
  absl::StatusOr<at::Tensor> pos = ComputePositionIds(b, preset);
  if (!pos.ok()) return pos.status();
  b.position_ids = *pos;
  return b;
}

PackedBatch BatchOnDevice(const PackedBatch& batch, const at::Device& device,
                          at::ScalarType pixel_dtype) {
  PackedBatch out = batch;
  out.input_ids = batch.input_ids.to(device);
  out.labels = batch.labels.to(device);
  if (batch.position_ids.defined()) out.position_ids = batch.position_ids.to(device);
  if (batch.pixel_values.defined()) out.pixel_values = batch.pixel_values.to(device, pixel_dtype);
  return out;
}

at::Device TestDeviceFromEnv() {
  const char* d = std::getenv("DHP_TEST_DEVICE");
  return at::Device(d != nullptr && *d ? d : "cpu");
}

}  // namespace dhp
