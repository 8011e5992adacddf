// safetensors files: read (memory-mapped) and write, without LibTorch.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section) plus an
// optional "__metadata__" string map, then the data. A reader validates every entry (known
// dtype, offsets inside the file, size = product(shape) * dtype size, no overlaps) and names the
// file and tensor in its errors. weights.h turns these views into LibTorch tensors.
//
// Thread-safety: a SafetensorsFile is immutable after Open and may be read from many threads.
#ifndef DHP_WORKER_MODEL_SAFETENSORS_H_
#define DHP_WORKER_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dhp {

enum class StDtype { kF32, kF16, kBF16, kF64, kI64, kI32, kI8, kU8, kBool };

// "F32" -> kF32 etc.; nullopt-like false for unknown names.
bool ParseStDtype(const std::string& name, StDtype* out);
const char* StDtypeName(StDtype dtype);
size_t StDtypeSize(StDtype dtype);

struct StTensorInfo {
  StDtype dtype;
  std::vector<int64_t> shape;
  size_t begin = 0;  // byte offsets within the data section
  size_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps the file and parses its header. INVALID_ARGUMENT names the file and what is wrong.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, StTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The bytes of a tensor listed in tensors(), valid while this object lives.
  const uint8_t* data(const StTensorInfo& info) const { return data_ + info.begin; }
  // Unmaps bytes [begin, end) of the data section from this process (widened to whole pages):
  // they leave its resident memory but stay in the page cache, and a later read maps them
  // again. A reader calls it once it has copied a tensor's bytes out (weights.h does), so that
  // the mapped checkpoint adds at most the tensor being copied to resident memory, not every
  // page read so far. Safe while other threads read the same bytes: the mapping is read-only,
  // so a page dropped under a reader is mapped again, unchanged.
  void Release(size_t begin, size_t end) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;
  std::map<std::string, StTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: raw bytes in row-major order.
struct StTensorData {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;  // must equal product(shape) * StDtypeSize(dtype)
};

// Writes tensors (sorted by name, as other writers do) with optional metadata, atomically: to
// `path`.tmp, then renamed over `path`.
absl::Status WriteSafetensors(const std::string& path, const std::vector<StTensorData>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// A tensor whose bytes are produced only when the writer reaches it, so that a file larger than
// memory is written one tensor at a time (dhp-ckpt export re-assembles a model this way).
struct StTensorSource {
  using WriteFn = std::function<void(const void* data, size_t nbytes)>;
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  // Called once, in file order: passes exactly product(shape) * StDtypeSize(dtype) bytes to
  // `write`, in one or more calls, in row-major order. An error aborts the file.
  std::function<absl::Status(const WriteFn& write)> produce;
};

// WriteSafetensors for produced tensors: the header first (from names, dtypes and shapes), then
// each tensor's bytes, sorted by name. Atomic as WriteSafetensors; on any error (a producer's,
// a byte count that differs from the shape's, a full disk) `path` is untouched and the .tmp file
// is removed.
absl::Status WriteSafetensorsStreamed(const std::string& path,
                                      const std::vector<StTensorSource>& tensors,
                                      const std::map<std::string, std::string>& metadata = {});

// A Hugging Face checkpoint directory: `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ("weight_map": name -> file). Tensor lookups go to the file
// that holds the name.
class CheckpointDir {
 public:
  static absl::StatusOr<std::unique_ptr<CheckpointDir>> Open(const std::string& dir);

  // Every tensor name in the checkpoint, sorted.
  std::vector<std::string> names() const;
  // nullptr when the checkpoint has no such tensor.
  const SafetensorsFile* FileOf(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> index_;
};

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_SAFETENSORS_H_
