#include "worker/model/param_init.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace dhp {
namespace {

uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t NameHash(const std::string& name) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// N(0, 1) for flat index i of the tensor keyed `key`: two 32-bit uniforms of one 64-bit draw.
double StandardNormal(uint64_t key, uint64_t i) {
  const uint64_t bits = SplitMix64(key ^ SplitMix64(i));
  const double u1 = (static_cast<double>(bits >> 32) + 0.5) * 0x1p-32;  // (0, 1)
  const double u2 = static_cast<double>(bits & 0xffffffffULL) * 0x1p-32;  // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

enum class InitKind { kZeros, kOnes, kNormal };

InitKind KindOf(const std::string& name, size_t dims) {
  const bool bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (bias || name == "bias") return InitKind::kZeros;
  if (dims == 1) return InitKind::kOnes;
  return InitKind::kNormal;
}

}  // namespace

at::Tensor InitSlice(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape,
                     int64_t dim, int64_t start, int64_t length, double std) {
  CheckSliceBounds(name, shape, dim, start, length);
  std::vector<int64_t> out_shape = shape;
  if (dim >= 0) out_shape[dim] = length;
  const InitKind kind = KindOf(name, shape.size());
  if (kind == InitKind::kZeros) return at::zeros(out_shape, at::kFloat);
  if (kind == InitKind::kOnes) return at::ones(out_shape, at::kFloat);
  at::Tensor out = at::empty(out_shape, at::kFloat);
  // The slice is `outer` runs of `length` x `inner` entries; run o starts at full flat index
  // (o * extent + start) * inner.
  int64_t outer = 1, inner = 1, extent = 1;
  if (dim < 0) {
    for (int64_t s : shape) inner *= s;
    start = 0;
    length = 1;
  } else {
    for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
    for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
    extent = shape[dim];
  }
  const uint64_t key = SplitMix64(seed ^ SplitMix64(NameHash(name)));
  float* data = out.data_ptr<float>();
  const int64_t rows = outer * length;  // (o, k) pairs, each `inner` contiguous entries
  at::parallel_for(0, rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(inner, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       const int64_t o = r / length, k = start + r % length;
                       const uint64_t base = static_cast<uint64_t>((o * extent + k) * inner);
                       float* dst = data + r * inner;
                       for (int64_t i = 0; i < inner; ++i) {
                         dst[i] = static_cast<float>(std * StandardNormal(key, base + i));
                       }
                     }
                   });
  return out;
}

void InitQwenWeights(torch::nn::Module& module, double std, uint64_t seed) {
  at::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    at::Tensor& p = item.value();
    const at::Tensor v = InitSlice(seed, item.key(), p.sizes().vec(), -1, 0, 0, std);
    p.copy_(v.view(p.sizes()));
  }
}

void InitQwenWeights(torch::nn::Module& module, double std) {
  const uint64_t seed = static_cast<uint64_t>(
      at::randint(int64_t{1} << 62, {1}, at::TensorOptions().dtype(at::kLong)).item<int64_t>());
  InitQwenWeights(module, std, seed);
}

InitTensorSource::InitTensorSource(const std::vector<ParamShape>& shapes, uint64_t seed,
                                   double std, at::TensorOptions options)
    : seed_(seed), std_(std), options_(options) {
  for (const ParamShape& p : shapes) shapes_[p.name] = p.shape;
}

std::vector<int64_t> InitTensorSource::Shape(const std::string& name) const {
  auto it = shapes_.find(name);
  TORCH_CHECK_VALUE(it != shapes_.end(), "the model has no parameter named ", name);
  return it->second;
}

bool InitTensorSource::Has(const std::string& name) const { return shapes_.count(name) > 0; }

at::Tensor InitTensorSource::Slice(const std::string& name, int64_t dim, int64_t start,
                                   int64_t length) const {
  return InitSlice(seed_, name, Shape(name), dim, start, length, std_).to(options_);
}

}  // namespace dhp
