#include "worker/model/checkpoint_source.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp {

CheckpointTensorSource::CheckpointTensorSource(std::unique_ptr<CheckpointDir> dir,
                                               at::TensorOptions options)
    : dir_(std::move(dir)), options_(options) {}

const StTensorInfo& CheckpointTensorSource::Info(const std::string& name,
                                                 const SafetensorsFile** file) const {
  *file = dir_->FileOf(name);
  TORCH_CHECK_VALUE(*file != nullptr, "the checkpoint has no tensor named ", name);
  return (*file)->tensors().at(name);
}

std::vector<int64_t> CheckpointTensorSource::Shape(const std::string& name) const {
  const SafetensorsFile* file = nullptr;
  return Info(name, &file).shape;
}

bool CheckpointTensorSource::Has(const std::string& name) const {
  return dir_->FileOf(name) != nullptr;
}

at::Tensor CheckpointTensorSource::Slice(const std::string& name, int64_t dim, int64_t start,
                                         int64_t length) const {
  const SafetensorsFile* file = nullptr;
  const StTensorInfo& info = Info(name, &file);
  CheckSliceBounds(name, info.shape, dim, start, length);
  at::ScalarType stored = at::kFloat;
  TORCH_CHECK_VALUE(StDtypeToScalarType(info.dtype, &stored), name, ": dtype ",
                    StDtypeName(info.dtype), " has no LibTorch type");
  std::vector<int64_t> out_shape = info.shape;
  int64_t outer = 1, inner = 1, extent = 1;  // the slice is `outer` runs of length x inner
  if (dim < 0) {
    for (int64_t s : info.shape) inner *= s;
    start = 0;
    length = 1;
  } else {
    out_shape[dim] = length;
    for (int64_t d = 0; d < dim; ++d) outer *= info.shape[d];
    for (size_t d = dim + 1; d < info.shape.size(); ++d) inner *= info.shape[d];
    extent = info.shape[dim];
  }
  const size_t esize = StDtypeSize(info.dtype);
  at::Tensor out = at::empty(out_shape, at::TensorOptions().dtype(stored));
  const uint8_t* src = file->data(info);
  uint8_t* dst = static_cast<uint8_t*>(out.data_ptr());
  const size_t run = static_cast<size_t>(length * inner) * esize;
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + o * run, src + static_cast<size_t>((o * extent + start) * inner) * esize,
                run);
  }
  return out.to(options_);
}

absl::Status CheckCheckpointCovers(const CheckpointDir& ckpt,
                                   const std::vector<ParamShape>& shapes) {
  LoadReport report;
  std::set<std::string> wanted;
  for (const ParamShape& p : shapes) {
    wanted.insert(p.name);
    const SafetensorsFile* file = ckpt.FileOf(p.name);
    if (file == nullptr) {
      report.missing.push_back(p.name);
      continue;
    }
    const std::vector<int64_t>& have = file->tensors().at(p.name).shape;
    if (have != p.shape) {
      report.wrong_shape.push_back(absl::StrCat(p.name, ": checkpoint [",
                                                absl::StrJoin(have, ", "), "], model [",
                                                absl::StrJoin(p.shape, ", "), "]"));
    }
  }
  for (const std::string& name : ckpt.names()) {
    if (wanted.count(name) == 0) report.unexpected.push_back(name);
  }
  if (report.clean()) return absl::OkStatus();
  return absl::InvalidArgumentError("checkpoint does not match the model: " + report.Summary());
}

}  // namespace dhp
