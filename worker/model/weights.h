// Model weights <-> safetensors, by parameter name (names match Hugging Face checkpoints).
//
// LoadWeights copies each checkpoint tensor into the model tensor of the same name (converting
// F16/BF16/F32 as needed) and reports names that are missing from the checkpoint, unexpected in
// it, of the wrong shape, or stored in another dtype (an integer tensor is never converted into a
// parameter); strict mode refuses any of them before changing a single tensor.
// Thread-safety: no shared state; callers must not use the target tensors meanwhile.
#ifndef DHP_WORKER_MODEL_WEIGHTS_H_
#define DHP_WORKER_MODEL_WEIGHTS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "worker/model/safetensors.h"

namespace dhp {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct LoadReport {
  int loaded = 0;
  std::vector<std::string> missing;      // in the model, not in the checkpoint
  std::vector<std::string> unexpected;   // in the checkpoint, not in the model
  std::vector<std::string> wrong_shape;  // "name: checkpoint [a, b], model [c, d]"
  std::vector<std::string> wrong_dtype;  // "name: stored as I64" (not IsParameterDtype)
  bool clean() const {
    return missing.empty() && unexpected.empty() && wrong_shape.empty() && wrong_dtype.empty();
  }
  // "3 missing (a, b, c); 1 unexpected (x)" with at most 5 names per kind; wrong dtypes last,
  // followed by the rule ("; a parameter must be F32, F16 or BF16").
  std::string Summary() const;
};

// F32, F16 and BF16: the stored dtypes a model parameter is loaded from (converted to the
// parameter's dtype). Any other (integers, BOOL, F64) is refused, never converted.
bool IsParameterDtype(StDtype dtype);
// "name: stored as I64; a parameter must be F32, F16 or BF16", or "" when IsParameterDtype.
std::string ParameterDtypeProblem(const std::string& name, StDtype dtype);

absl::StatusOr<LoadReport> LoadWeights(const CheckpointDir& ckpt, const NamedTensors& params,
                                       bool strict);

// The LibTorch type of a stored dtype; false for none.
bool StDtypeToScalarType(StDtype dtype, at::ScalarType* out);

// A copy of one stored tensor as a CPU tensor of its stored dtype. The mapped bytes read leave
// the process's resident memory again (SafetensorsFile::Release), here and in ReadTensorSlice.
at::Tensor ReadTensor(const SafetensorsFile& file, const StTensorInfo& info);
// A copy of entries [start, start + length) along `dim` of one stored tensor (every other
// dimension whole), CPU, stored dtype; dim -1: the whole tensor. Only the slice's bytes are read.
// The caller checks the bounds (CheckSliceBounds in tensor_source.h) and that the dtype has a
// LibTorch type (StDtypeToScalarType).
at::Tensor ReadTensorSlice(const SafetensorsFile& file, const StTensorInfo& info, int64_t dim,
                           int64_t start, int64_t length);

// Writes the tensors (moved to CPU, made contiguous) to `path`. Dtypes F32, F16, BF16, I64.
absl::Status SaveWeights(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_WEIGHTS_H_
