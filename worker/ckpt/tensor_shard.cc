#include "worker/ckpt/tensor_shard.h"

#include <utility>

#include "worker/model/torch_status.h"

namespace dhp::ckpt {

absl::StatusOr<WrittenShard> WriteTensorShard(const std::string& dir, const std::string& file,
                                              const NamedTensors& tensors,
                                              const std::map<std::string, std::string>& metadata) {
  // SaveWeights writes <temp>.tmp and renames it to <temp>.
  return WriteShardWith(dir, file, [&](const std::string& temp) {
    absl::Status saved;
    absl::Status caught = CatchTorch(file, [&] { saved = SaveWeights(temp, tensors, metadata); });
    return caught.ok() ? saved : caught;
  });
}

absl::StatusOr<LoadedShard> ReadTensorShard(const std::string& dir, const ShardInfo& expected) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = OpenShard(dir, expected);
  if (!file.ok()) return file.status();
  LoadedShard out;
  out.metadata = (*file)->metadata();
  absl::Status s = CatchTorch((*file)->path(), [&] {
    for (const auto& [name, info] : (*file)->tensors()) {
      out.tensors.emplace_back(name, ReadTensor(**file, info));
    }
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace dhp::ckpt
