#include "worker/model/tensor_source.h"

#include <c10/util/Exception.h>

#include <utility>

namespace dhp {

at::Tensor TensorSource::Whole(const std::string& name) const {
  return Slice(name, -1, 0, 0);
}

at::Tensor TensorSource::Rows(const std::string& name,
                              const std::vector<std::pair<int64_t, int64_t>>& ranges,
                              int64_t dim) const {
  std::vector<at::Tensor> parts;
  parts.reserve(ranges.size());
  for (const auto& [start, length] : ranges) parts.push_back(Slice(name, dim, start, length));
  if (parts.size() == 1) return parts[0];
  return at::cat(parts, dim);
}

at::Tensor CastTensorSource::Slice(const std::string& name, int64_t dim, int64_t start,
                                   int64_t length) const {
  at::Tensor t = base_.Slice(name, dim, start, length);
  if (!at::isFloatingType(t.scalar_type()) || t.scalar_type() == dtype_) return t;
  return t.to(dtype_);
}

void CheckSliceBounds(const std::string& name, const std::vector<int64_t>& shape, int64_t dim,
                      int64_t start, int64_t length) {
  if (dim == -1) return;  // the whole tensor
  TORCH_CHECK_VALUE(!shape.empty(), "tensor ", name,
                    " is a scalar: only its whole value can be read");
  TORCH_CHECK_VALUE(dim >= 0 && dim < static_cast<int64_t>(shape.size()), "tensor ", name,
                    " has ", shape.size(), " dimensions; cannot slice dimension ", dim);
  TORCH_CHECK_VALUE(start >= 0 && length >= 0 && start + length <= shape[dim], "tensor ", name,
                    ": slice [", start, ", ", start + length, ") of dimension ", dim,
                    " is outside its extent ", shape[dim]);
}

NamedTensorSource::NamedTensorSource(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  for (const auto& [name, t] : tensors) tensors_.insert(name, t);
}

const at::Tensor& NamedTensorSource::Find(const std::string& name) const {
  const at::Tensor* t = tensors_.find(name);
  TORCH_CHECK_VALUE(t != nullptr && t->defined(), "no tensor named ", name);
  return *t;
}

std::vector<int64_t> NamedTensorSource::Shape(const std::string& name) const {
  return Find(name).sizes().vec();
}

bool NamedTensorSource::Has(const std::string& name) const {
  const at::Tensor* t = tensors_.find(name);
  return t != nullptr && t->defined();
}

at::Tensor NamedTensorSource::Slice(const std::string& name, int64_t dim, int64_t start,
                                    int64_t length) const {
  const at::Tensor& full = Find(name);
  CheckSliceBounds(name, full.sizes().vec(), dim, start, length);
  at::NoGradGuard no_grad;
  if (dim < 0) return full.detach().clone(at::MemoryFormat::Contiguous);
  return full.detach().narrow(dim, start, length).clone(at::MemoryFormat::Contiguous);
}

NamedTensorSource ModuleTensorSource(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    params.emplace_back(item.key(), item.value());
  }
  return NamedTensorSource(params);
}

}  // namespace dhp
