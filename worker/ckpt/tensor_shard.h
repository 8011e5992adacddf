// The LibTorch side of checkpoint shards (shard_file.h): named tensors in, named tensors out.
// Writing keeps each tensor's dtype (F32, F16, BF16, I64; moved to the CPU, made contiguous);
// reading verifies size and CRC-32C first and returns CPU copies (weights.h ReadTensor).
//
// Thread-safety: no shared state.
#ifndef DHP_WORKER_CKPT_TENSOR_SHARD_H_
#define DHP_WORKER_CKPT_TENSOR_SHARD_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "worker/ckpt/shard_file.h"
#include "worker/model/weights.h"

namespace dhp::ckpt {

// Writes <dir>/<file> atomically (shard_file.h) from `tensors` (unique names) and `metadata`.
absl::StatusOr<WrittenShard> WriteTensorShard(const std::string& dir, const std::string& file,
                                              const NamedTensors& tensors,
                                              const std::map<std::string, std::string>& metadata);

struct LoadedShard {
  NamedTensors tensors;  // sorted by name (the file's order), CPU
  std::map<std::string, std::string> metadata;
};

// Verifies <dir>/<expected.file> (size, CRC-32C) and reads every tensor and the metadata.
absl::StatusOr<LoadedShard> ReadTensorShard(const std::string& dir, const ShardInfo& expected);

}  // namespace dhp::ckpt

#endif  // DHP_WORKER_CKPT_TENSOR_SHARD_H_
