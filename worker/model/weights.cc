#include "worker/model/weights.h"

#include <cstring>
#include <set>
#include <sstream>

namespace dhp {
namespace {

constexpr char kParameterDtypes[] = "F32, F16 or BF16";  // IsParameterDtype

bool ToScalarTypeImpl(StDtype d, at::ScalarType* out) {
  switch (d) {
    case StDtype::kF32: *out = at::kFloat; return true;
    case StDtype::kF16: *out = at::kHalf; return true;
    case StDtype::kBF16: *out = at::kBFloat16; return true;
    case StDtype::kF64: *out = at::kDouble; return true;
    case StDtype::kI64: *out = at::kLong; return true;
    case StDtype::kI32: *out = at::kInt; return true;
    case StDtype::kI8: *out = at::kChar; return true;
    case StDtype::kU8: *out = at::kByte; return true;
    case StDtype::kBool: *out = at::kBool; return true;
  }
  return false;
}

bool FromScalarType(at::ScalarType t, StDtype* out) {
  switch (t) {
    case at::kFloat: *out = StDtype::kF32; return true;
    case at::kHalf: *out = StDtype::kF16; return true;
    case at::kBFloat16: *out = StDtype::kBF16; return true;
    case at::kLong: *out = StDtype::kI64; return true;
    default: return false;
  }
}

std::string ShapeText(at::IntArrayRef shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

void AppendNames(std::ostringstream& out, const char* kind, const std::vector<std::string>& names,
                 bool* first) {
  if (names.empty()) return;
  out << (*first ? "" : "; ") << names.size() << " " << kind << " (";
  for (size_t i = 0; i < names.size() && i < 5; ++i) out << (i ? ", " : "") << names[i];
  if (names.size() > 5) out << ", ...";
  out << ")";
  *first = false;
}

}  // namespace

std::string LoadReport::Summary() const {
  std::ostringstream out;
  bool first = true;
  AppendNames(out, "missing", missing, &first);
  AppendNames(out, "unexpected", unexpected, &first);
  AppendNames(out, "with the wrong shape", wrong_shape, &first);
  AppendNames(out, "of another dtype", wrong_dtype, &first);
  if (!wrong_dtype.empty()) out << "; a parameter must be " << kParameterDtypes;
  if (first) out << loaded << " tensors loaded";
  return out.str();
}

bool IsParameterDtype(StDtype dtype) {
  return dtype == StDtype::kF32 || dtype == StDtype::kF16 || dtype == StDtype::kBF16;
}

std::string ParameterDtypeProblem(const std::string& name, StDtype dtype) {
  if (IsParameterDtype(dtype)) return "";
  return name + ": stored as " + StDtypeName(dtype) + "; a parameter must be " + kParameterDtypes;
}

at::Tensor ReadTensor(const SafetensorsFile& file, const StTensorInfo& info) {
  at::ScalarType type = at::kFloat;
  ToScalarTypeImpl(info.dtype, &type);
  at::Tensor out = at::empty(info.shape, at::TensorOptions().dtype(type));
  std::memcpy(out.data_ptr(), file.data(info), info.end - info.begin);
  file.Release(info.begin, info.end);
  return out;
}

at::Tensor ReadTensorSlice(const SafetensorsFile& file, const StTensorInfo& info, int64_t dim,
                           int64_t start, int64_t length) {
  if (dim < 0) return ReadTensor(file, info);
  at::ScalarType type = at::kFloat;
  ToScalarTypeImpl(info.dtype, &type);
  std::vector<int64_t> out_shape = info.shape;
  out_shape[dim] = length;
  int64_t outer = 1, inner = 1;  // the slice is `outer` runs of length x inner elements
  for (int64_t d = 0; d < dim; ++d) outer *= info.shape[d];
  for (size_t d = dim + 1; d < info.shape.size(); ++d) inner *= info.shape[d];
  const int64_t extent = info.shape[dim];
  const size_t esize = StDtypeSize(info.dtype);
  at::Tensor out = at::empty(out_shape, at::TensorOptions().dtype(type));
  const uint8_t* src = file.data(info);
  uint8_t* dst = static_cast<uint8_t*>(out.data_ptr());
  const size_t run = static_cast<size_t>(length * inner) * esize;
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + o * run, src + static_cast<size_t>((o * extent + start) * inner) * esize,
                run);
  }
  // The span from the first run to the end of the last one was read (every page of it when the
  // runs are shorter than a page).
  if (outer > 0 && run > 0) {
    file.Release(info.begin + static_cast<size_t>(start * inner) * esize,
                 info.begin + static_cast<size_t>(((outer - 1) * extent + start + length) *
                                                  inner) * esize);
  }
  return out;
}

bool StDtypeToScalarType(StDtype dtype, at::ScalarType* out) {
  return ToScalarTypeImpl(dtype, out);
}

absl::StatusOr<LoadReport> LoadWeights(const CheckpointDir& ckpt, const NamedTensors& params,
                                       bool strict) {
  LoadReport report;
  std::set<std::string> model_names;
  std::vector<std::pair<const at::Tensor*, std::pair<const SafetensorsFile*, StTensorInfo>>> plan;
  for (const auto& [name, tensor] : params) {
    model_names.insert(name);
    const SafetensorsFile* file = ckpt.FileOf(name);
    if (file == nullptr) {
      report.missing.push_back(name);
      continue;
    }
    const StTensorInfo& info = file->tensors().at(name);
    if (at::IntArrayRef(info.shape) != tensor.sizes()) {
      report.wrong_shape.push_back(name + ": checkpoint " + ShapeText(info.shape) + ", model " +
                                   ShapeText(tensor.sizes()));
      continue;
    }
    if (!IsParameterDtype(info.dtype)) {
      report.wrong_dtype.push_back(name + ": stored as " + StDtypeName(info.dtype));
      continue;
    }
    plan.push_back({&tensor, {file, info}});
  }
  for (const std::string& name : ckpt.names()) {
    if (model_names.count(name) == 0) report.unexpected.push_back(name);
  }
  if (strict && !report.clean()) {
    return absl::InvalidArgumentError("checkpoint does not match the model: " + report.Summary());
  }
  at::NoGradGuard no_grad;
  for (auto& [tensor, source] : plan) {
    at::Tensor stored = ReadTensor(*source.first, source.second);
    const_cast<at::Tensor*>(tensor)->copy_(stored);
    ++report.loaded;
  }
  return report;
}

absl::Status SaveWeights(const std::string& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> keep;  // owns the contiguous CPU copies while writing
  std::vector<StTensorData> data;
  for (const auto& [name, tensor] : tensors) {
    StDtype dtype;
    if (!FromScalarType(tensor.scalar_type(), &dtype)) {
      return absl::InvalidArgumentError("tensor \"" + name + "\" has a dtype safetensors "
                                        "writing does not support here");
    }
    keep.push_back(tensor.detach().to(at::kCPU).contiguous());
    const at::Tensor& t = keep.back();
    data.push_back({name, dtype, t.sizes().vec(), t.data_ptr(),
                    static_cast<size_t>(t.numel()) * t.element_size()});
  }
  return WriteSafetensors(path, data, metadata);
}

}  // namespace dhp
