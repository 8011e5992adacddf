// ParamFactory: where a module's parameters come from while it is built. A module constructor
// that takes one asks it for each parameter, by name and full shape, and registers the tensor it
// gets as it is (dtype, device, shape): nothing else is allocated. Shard-first construction
// (../../shared/DESIGN.md) passes a factory that yields exactly what the rank keeps (the whole
// tensor, or its tensor-parallel slice) from a TensorSource, in the training dtype on the
// device, so no default-initialised parameter ever exists; `meta` tensors work too.
//
//   LibTorchDefaultInit  what the torch::nn modules the factory-built ones replace would hold
//                        (single-rank models and tests: their values are unchanged);
//   WholeTensors         each parameter whole from a TensorSource (a replicated tower);
//   ScopedFactory        names relative to a sub-module: its parent prefixes them.
//
// Thread-safety: a factory is called on the thread that builds the module; those below are
// stateless apart from what they borrow (a TensorSource, which must outlive the construction).
#ifndef DHP_WORKER_MODEL_PARAM_FACTORY_H_
#define DHP_WORKER_MODEL_PARAM_FACTORY_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "worker/model/tensor_source.h"

namespace dhp {

enum class ParamRole {
  kNormWeight,    // an RMSNorm weight [dim]
  kLinearWeight,  // a linear or convolution weight [out, in, ...]
  kLinearBias,    // a linear bias [out]
};

// One parameter a module asks for.
struct ParamRequest {
  std::string name;            // relative to the factory's module, e.g. "attn.qkv.weight"
  std::vector<int64_t> shape;  // the full (single-rank, Hugging Face) shape
  ParamRole role = ParamRole::kLinearWeight;
  int64_t fan_in = 0;  // kLinearBias: the layer's input features (LibTorch's default bound)
};

// Returns the tensor the module keeps for the request: the full shape, or a slice of it for a
// sharded module (which then reads its sizes from the tensor). Throws c10::Error on failure.
using ParamFactory = std::function<at::Tensor(const ParamRequest&)>;

// The tensor of `make` for `request` (shorthand for building the request in place).
at::Tensor MakeParam(const ParamFactory& make, const std::string& name, std::vector<int64_t> shape,
                     ParamRole role, int64_t fan_in = 0);

// `make` with `prefix` (e.g. "blocks.3.") put before every requested name.
ParamFactory ScopedFactory(ParamFactory make, const std::string& prefix);

// fp32 CPU tensors initialised as LibTorch's torch::nn::Linear / Conv initialise theirs
// (kaiming-uniform with a = sqrt(5); biases uniform in +-1/sqrt(fan_in)) and RMSNorm weights
// ones, drawn from the global generator in request order: a module asking in the order its
// torch::nn predecessor registered gets the same values and leaves the generator in the same
// state. Not layout-independent: the initialisation of a run is param_init.h's.
ParamFactory LibTorchDefaultInit();

// Throws ValueError unless `src` has the tensor `name` with the request's full shape.
void CheckSourceTensor(const TensorSource& src, const std::string& name,
                       const ParamRequest& request);

// Each parameter whole from src's tensor prefix + request.name (checked by CheckSourceTensor),
// in the source's dtype and device. `src` is borrowed for the construction.
ParamFactory WholeTensors(const TensorSource& src, const std::string& prefix);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_PARAM_FACTORY_H_
