// TensorSource: where a rank's parameter values come from, by Hugging Face checkpoint name, one
// slice at a time. Shard-first construction (../../shared/DESIGN.md) asks a source only for the
// slices the rank trains, so no rank ever holds the full model, not even while it is built:
//   ModuleTensorSource  slices of a module already in memory (tests, the single-rank trainer);
//   InitTensorSource    the initialisation itself, computed per slice (param_init.h);
//   a checkpoint        the slices' bytes of a safetensors checkpoint (sharded loading).
// Every source gives rank r's slice equal to slicing the full tensor it stands for, so a layout
// never changes the model.
//
// Thread-safety: const methods may be called from several threads unless an implementation
// says otherwise. Errors: c10::Error (ValueError) for an unknown name or a slice out of range,
// like the LibTorch module constructors that call it; builders catch it at their Status boundary.
#ifndef DHP_WORKER_MODEL_TENSOR_SOURCE_H_
#define DHP_WORKER_MODEL_TENSOR_SOURCE_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dhp {

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  // The full tensor's shape. Throws when `name` is unknown.
  virtual std::vector<int64_t> Shape(const std::string& name) const = 0;
  // True when the source knows `name`.
  virtual bool Has(const std::string& name) const = 0;
  // A fresh contiguous tensor holding entries [start, start + length) along `dim` of the full
  // tensor `name` (every other dimension whole), in the source's dtype and device; dim -1: the
  // whole tensor (start and length are ignored).
  virtual at::Tensor Slice(const std::string& name, int64_t dim, int64_t start,
                           int64_t length) const = 0;

  // The whole tensor: Slice(name, -1, 0, 0).
  at::Tensor Whole(const std::string& name) const;
  // Several row ranges of dim 0 concatenated, e.g. the q, k and v parts of a fused projection.
  at::Tensor Rows(const std::string& name, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                  int64_t dim = 0) const;
};

// Slices of tensors held in memory, by name, in their dtype and device (undefined tensors count
// as absent). The tensors are shared, not copied; each Slice is a copy.
class NamedTensorSource : public TensorSource {
 public:
  explicit NamedTensorSource(const std::vector<std::pair<std::string, at::Tensor>>& tensors);

  std::vector<int64_t> Shape(const std::string& name) const override;
  bool Has(const std::string& name) const override;
  at::Tensor Slice(const std::string& name, int64_t dim, int64_t start,
                   int64_t length) const override;

 private:
  const at::Tensor& Find(const std::string& name) const;

  torch::OrderedDict<std::string, at::Tensor> tensors_;
};

// The parameters of a module in memory (named_parameters(), names relative to it): for tests
// and for ranks that already hold the full tensors.
NamedTensorSource ModuleTensorSource(const torch::nn::Module& module);

// Another source's slices in `dtype` (floating-point tensors only; others pass as they are): how
// a stage trains in bf16 from an fp32 initialisation or checkpoint. Each slice is converted on
// its own, so the extra memory is one slice; a slice already in `dtype` is not copied again. The
// base source is borrowed.
class CastTensorSource : public TensorSource {
 public:
  CastTensorSource(const TensorSource& base, at::ScalarType dtype) : base_(base), dtype_(dtype) {}

  std::vector<int64_t> Shape(const std::string& name) const override { return base_.Shape(name); }
  bool Has(const std::string& name) const override { return base_.Has(name); }
  at::Tensor Slice(const std::string& name, int64_t dim, int64_t start,
                   int64_t length) const override;

 private:
  const TensorSource& base_;
  at::ScalarType dtype_;
};

// Throws (ValueError) unless dim is -1 or [start, start + length) lies within `shape`'s `dim`.
void CheckSliceBounds(const std::string& name, const std::vector<int64_t>& shape, int64_t dim,
                      int64_t start, int64_t length);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_TENSOR_SOURCE_H_
