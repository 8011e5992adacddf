// One rank's checkpoint shard on disk: a safetensors file (worker/model/safetensors.h) of named
// tensors plus string metadata, written atomically and described by its size and CRC-32C, the
// figures the rank reports (CheckpointShard in proto/dhp/v1/job.proto) and verifies before it
// resumes from the file.
//
// Writing (WriteShard): creates the directory if needed (and fsyncs its parent), writes
// <dir>/<file>.tmp, fsyncs it, computes its size and CRC-32C, renames it to <dir>/<file> and
// fsyncs the directory: a crash leaves either no <file> or a complete one (plus maybe a stale
// .tmp, overwritten by the next attempt). The checksum covers the whole file.
//
// Reading (VerifyShard, OpenShard): the size and checksum are checked against the expected
// ShardInfo BEFORE the file is parsed. Errors name the path and what differs:
//   NOT_FOUND  "/ckpt/step-00000050/rank-00001.safetensors is missing"
//   DATA_LOSS  ".../rank-00001.safetensors has 1234 bytes, expected 5678"
//   DATA_LOSS  ".../rank-00001.safetensors: checksum mismatch: expected 1a2b3c4d, file has 9f8e7d6c"
// tensor_shard.h adds the LibTorch side (tensors in, tensors out).
//
// Thread-safety: no shared state; concurrent writers must use different files (ranks do).
#ifndef DHP_WORKER_CKPT_SHARD_FILE_H_
#define DHP_WORKER_CKPT_SHARD_FILE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/safetensors.h"

namespace dhp::ckpt {

// What a rank reports about its file and what a reader expects of it.
struct ShardInfo {
  std::string file;        // name inside the checkpoint directory
  int64_t size_bytes = 0;
  std::string crc32c;      // 8 lower-case hex digits, of the whole file
};

struct WrittenShard {
  ShardInfo info;
  double write_seconds = 0;  // from the first byte to the directory fsync
};

// <dir>/<file>.tmp: where a shard is written before it is published.
std::string TempPathOf(const std::string& dir, const std::string& file);

// Writes the tensors and metadata as <dir>/<file>, atomically (see the file comment).
absl::StatusOr<WrittenShard> WriteShard(const std::string& dir, const std::string& file,
                                        const std::vector<StTensorData>& tensors,
                                        const std::map<std::string, std::string>& metadata);

// The same for writers that produce the file themselves: creates `dir`, calls
// write_temp(TempPathOf(dir, file)), which must write the complete file there, then publishes
// it (PublishShard).
absl::StatusOr<WrittenShard> WriteShardWith(
    const std::string& dir, const std::string& file,
    const std::function<absl::Status(const std::string& temp_path)>& write_temp);

// Publishes a complete TempPathOf(dir, file): fsync, size and CRC-32C, rename to <dir>/<file>,
// fsync of the directory.
absl::StatusOr<ShardInfo> PublishShard(const std::string& dir, const std::string& file);

// Creates `dir` and its missing parents; fsyncs the parent of each directory it created.
absl::Status MakeDurableDirs(const std::string& dir);

// Size and CRC-32C of an existing <dir>/<file> (NOT_FOUND "... is missing").
absl::StatusOr<ShardInfo> DescribeShard(const std::string& dir, const std::string& file);

// Checks <dir>/<expected.file> against the expected size and checksum (see the file comment).
absl::Status VerifyShard(const std::string& dir, const ShardInfo& expected);

// VerifyShard, then parses the file.
absl::StatusOr<std::unique_ptr<SafetensorsFile>> OpenShard(const std::string& dir,
                                                           const ShardInfo& expected);

}  // namespace dhp::ckpt

#endif  // DHP_WORKER_CKPT_SHARD_FILE_H_
