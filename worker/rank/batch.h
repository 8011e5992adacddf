// Turns the data pipeline's packed sequences (plain C++ vectors) into the model's PackedBatch
// tensors on a device, and the host-side counts a training step reports.
//
// Thread-safety: pure functions.
#ifndef DHP_WORKER_RANK_BATCH_H_
#define DHP_WORKER_RANK_BATCH_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "worker/data/packing.h"
#include "worker/model/qwen2_5_vl.h"

namespace dhp {

// input_ids/labels [S] int64, position_ids [3, S] int64, pixel_values [N, patch_dim] fp32
// (undefined without images), image_grids and cu_seqlens copied; every tensor is a fresh copy on
// `device` (nothing aliases `seq`). Throws c10::ValueError when the sizes are inconsistent.
PackedBatch ToPackedBatch(const data::PackedSequence& seq, const at::Device& device);

// The number of positions whose next-token loss is taken, exactly CausalLmLossSum's count:
// position i counts when i + 1 lies in the same sample and labels[i + 1] != -100. Known on the
// host before the forward pass, so a step can weight several packed sequences exactly.
int64_t CountLossTargets(const data::PackedSequence& seq);

// The <|image_pad|> tokens of the sequence: sum over images of t*h*w / merge^2.
int64_t CountImageTokens(const data::PackedSequence& seq, int spatial_merge_size);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_BATCH_H_
