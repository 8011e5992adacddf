// Export of a dhp training checkpoint as a Hugging Face model directory, which
// transformers' Qwen2_5_VLForConditionalGeneration.from_pretrained(dir) and vLLM load directly:
// what `dhp-ckpt export CHECKPOINT_DIR --hf-dir OUT_DIR` runs. The tensors are re-assembled as
// for one file (ckpt_export.h: any layout, streamed one tensor at a time, memory about twice the
// largest tensor); the directory holds:
//
//   config.json   model.weights_path's own config.json (when the job named a model directory
//                 that has one) with "torch_dtype" (and "dtype", where transformers 5 wrote it)
//                 set to the weights' dtype; otherwise written from the preset (HfConfigJson).
//   weights       transformers' convention: everything in one `model.safetensors` when it fits
//                 in max_shard_bytes, else `model-00001-of-0000N.safetensors` ... and
//                 `model.safetensors.index.json` ({"metadata": {"total_size": bytes of tensor
//                 data}, "weight_map": {name: file}}). Tensors go to shards in name order; a new
//                 shard starts when the next tensor's bytes would pass max_shard_bytes (counted
//                 as transformers counts them: tensor data, not the JSON header); a tensor larger
//                 than the limit gets a shard of its own.
//   tokenizer     the files of kTokenizerFiles that exist next to model.weights_path's
//                 config.json, copied byte for byte. A preset-only job has none to copy (the tiny
//                 preset's tokenizer is dhp's configs/tiny-tokenizer.json, not a transformers
//                 tokenizer directory).
//
// The directory appears atomically as a whole: everything is written into a sibling
// OUT_DIR.tmp-XXXXXX, which is renamed to OUT_DIR at the end and removed on any error. An
// existing OUT_DIR must be an empty directory.
//
// Thread-safety: no shared state.
#ifndef DHP_WORKER_RANK_HF_EXPORT_H_
#define DHP_WORKER_RANK_HF_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/rank/ckpt_export.h"

namespace dhp {

// transformers' default shard size, "5GB" (decimal).
inline constexpr int64_t kDefaultMaxShardBytes = 5'000'000'000;

// The tokenizer, processor and generation files copied from the model directory when present.
extern const char* const kTokenizerFiles[10];

struct HfExportOptions {
  // checkpoint_dir, spec, data_root and dtype as for ExportCheckpoint; out_path is not used.
  CheckpointExportOptions checkpoint;
  std::string out_dir;  // must not exist, or be an empty directory; its parent must exist
  int64_t max_shard_bytes = kDefaultMaxShardBytes;
};

struct HfExportResult {
  CheckpointExportResult checkpoint;  // bytes: all weight files together
  std::string config_source;          // "preset tiny", or the path of the config.json copied
  std::string torch_dtype;            // config.json's: "float32", "bfloat16" or "float16"
  std::vector<std::string> weight_files;  // in order; the index file is not among them
  bool indexed = false;                   // whether model.safetensors.index.json was written
  std::vector<std::string> copied;        // from kTokenizerFiles, in that order
};

// Errors: ExportCheckpoint's, and FAILED_PRECONDITION for an OUT_DIR that exists and is not an
// empty directory, INVALID_ARGUMENT for max_shard_bytes < 1, the I/O errors of writing. Nothing
// is left behind on error (neither OUT_DIR nor the temporary directory).
absl::StatusOr<HfExportResult> ExportHfDirectory(const HfExportOptions& options);

// Which tensors go to which shard: `bytes` are the tensors' sizes in file order; the result
// lists each shard's tensor indexes. Every shard holds at most `max_bytes`, or one tensor.
std::vector<std::vector<size_t>> PlanShards(const std::vector<int64_t>& bytes, int64_t max_bytes);

// "5GB" -> 5e9, "500MB", "2GiB" -> 2^31, "1000" (bytes), as transformers' max_shard_size reads
// them (KB/MB/GB decimal, KiB/MiB/GiB binary, case-insensitive). INVALID_ARGUMENT otherwise.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_HF_EXPORT_H_
