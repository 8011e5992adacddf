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
  TORCH_CHECK_VALUE(IsParameterDtype(info.dtype), ParameterDtypeProblem(name, info.dtype));
  return ReadTensorSlice(*file, info, dim, start, length).to(options_);
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
    const StTensorInfo& have = file->tensors().at(p.name);
    if (have.shape != p.shape) {
      report.wrong_shape.push_back(absl::StrCat(p.name, ": checkpoint [",
                                                absl::StrJoin(have.shape, ", "), "], model [",
                                                absl::StrJoin(p.shape, ", "), "]"));
    } else if (!IsParameterDtype(have.dtype)) {
      report.wrong_dtype.push_back(absl::StrCat(p.name, ": stored as ", StDtypeName(have.dtype)));
    }
  }
  for (const std::string& name : ckpt.names()) {
    if (wanted.count(name) == 0) report.unexpected.push_back(name);
  }
  if (report.clean()) return absl::OkStatus();
  return absl::InvalidArgumentError("checkpoint does not match the model: " + report.Summary());
}

}  // namespace dhp
