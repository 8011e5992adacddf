// CheckpointTensorSource: a Hugging Face checkpoint directory (model.safetensors or the shards of
// model.safetensors.index.json, memory-mapped by CheckpointDir) as a TensorSource. A slice is
// copied straight from the mapped bytes of its rows (one memcpy per contiguous run), so a rank
// reads only the byte ranges of its slices, and the extra host memory while loading is the
// slice itself plus its conversion to the target dtype/device.
//
// CheckCheckpointCovers is the strict check done before anything is built: every parameter of
// the model is in the checkpoint with its full shape and a parameter dtype (F32, F16 or BF16:
// IsParameterDtype), and the checkpoint has nothing else.
//
// Thread-safety: immutable after construction; Slice may be called from several threads.
#ifndef DHP_WORKER_MODEL_CHECKPOINT_SOURCE_H_
#define DHP_WORKER_MODEL_CHECKPOINT_SOURCE_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/param_shapes.h"
#include "worker/model/safetensors.h"
#include "worker/model/tensor_source.h"
#include "worker/model/weights.h"

namespace dhp {

class CheckpointTensorSource : public TensorSource {
 public:
  // Slices come as `options` (dtype, device); stored F16/BF16/F32 are converted. A tensor
  // stored in another dtype (an integer, BOOL, F64) is never converted: Slice throws
  // (ValueError, "name: stored as I64; a parameter must be F32, F16 or BF16").
  CheckpointTensorSource(std::unique_ptr<CheckpointDir> dir, at::TensorOptions options);

  std::vector<int64_t> Shape(const std::string& name) const override;
  bool Has(const std::string& name) const override;
  at::Tensor Slice(const std::string& name, int64_t dim, int64_t start,
                   int64_t length) const override;

  const CheckpointDir& dir() const { return *dir_; }

 private:
  const StTensorInfo& Info(const std::string& name, const SafetensorsFile** file) const;

  std::unique_ptr<CheckpointDir> dir_;
  at::TensorOptions options_;
};

// OK when `ckpt` holds exactly the tensors of `shapes` with those shapes, each stored as F32,
// F16 or BF16; otherwise InvalidArgument listing what is missing, unexpected, of another shape
// or of another dtype (LoadReport::Summary).
absl::Status CheckCheckpointCovers(const CheckpointDir& ckpt,
                                   const std::vector<ParamShape>& shapes);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_CHECKPOINT_SOURCE_H_
