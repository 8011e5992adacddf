// The initialisation of dhp's models, computed one slice at a time so that it never depends on
// the layout: entry i (row-major flat index in the full tensor) of parameter `name` is a pure
// function of (seed, name, i), so rank r's shard equals the slice of the single-rank init.
//
// The rule follows Hugging Face's _init_weights for Qwen2.5-VL: biases ("*.bias") zero, other
// 1-D parameters (RMSNorm weights) one, every other weight N(0, std^2). The normal draws come
// from a counter-based generator (SplitMix64 of seed, name and index, then Box-Muller in fp64),
// not from LibTorch's generator, whose stream cannot be sliced: the values are the same on
// every LibTorch version, thread count and device.
//
// Thread-safety: stateless; an InitTensorSource is immutable and may be read from many threads.
#ifndef DHP_WORKER_MODEL_PARAM_INIT_H_
#define DHP_WORKER_MODEL_PARAM_INIT_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/model/param_shapes.h"
#include "worker/model/tensor_source.h"

namespace dhp {

// Entries [start, start + length) along `dim` (dim -1: the whole tensor) of parameter `name`
// of full shape `shape`, as a contiguous fp32 CPU tensor.
at::Tensor InitSlice(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape,
                     int64_t dim, int64_t start, int64_t length, double std);

// Every parameter of `module` (names as named_parameters() gives them) set to its whole
// InitSlice, in place.
void InitQwenWeights(torch::nn::Module& module, double std, uint64_t seed);
// The same with a seed drawn from LibTorch's default CPU generator (at::manual_seed makes it
// reproducible): for tests that want distinct models per seed.
void InitQwenWeights(torch::nn::Module& module, double std = 0.02);

// The initialisation as a TensorSource over a table of parameter shapes (param_shapes.h):
// each slice is computed on the host and handed over in `options` (dtype, device).
class InitTensorSource : public TensorSource {
 public:
  InitTensorSource(const std::vector<ParamShape>& shapes, uint64_t seed, double std,
                   at::TensorOptions options = at::TensorOptions().dtype(at::kFloat));

  std::vector<int64_t> Shape(const std::string& name) const override;
  bool Has(const std::string& name) const override;
  at::Tensor Slice(const std::string& name, int64_t dim, int64_t start,
                   int64_t length) const override;

 private:
  std::map<std::string, std::vector<int64_t>> shapes_;
  uint64_t seed_;
  double std_;
  at::TensorOptions options_;
};

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_PARAM_INIT_H_
