// The data side of a training rank, built from a normalised job spec: the tokenizer and chat
// template, the dataset mix (spec.data.registry / datasets), the sample builder (Qwen2.5-VL image
// preprocessing, data.max_seq_len) and resumable data loaders over them. Shared by the
// single-rank trainer (trainer.h) and the distributed rank's data (dist_data.h), so both read the
// same samples in the same order for the same spec.
//
// Paths: relative annotation paths, image roots and model.weights_path are taken relative to
// `data_root`. Tokenizer: `tokenizer_path`, or <model.weights_path>/tokenizer.json when weights are
// given, or configs/tiny-tokenizer.json (relative to the working directory) for the tiny preset;
// other presets need one. The tokenizer must fit the preset's vocabulary and special tokens.
//
// Thread-safety: immutable after Create; each loader has one consumer.
#ifndef DHP_WORKER_RANK_DATA_PIPELINE_H_
#define DHP_WORKER_RANK_DATA_PIPELINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/data/bpe_tokenizer.h"
#include "worker/data/chat_template.h"
#include "worker/data/data_loader.h"
#include "worker/data/dataset_mix.h"
#include "worker/data/packing.h"
#include "worker/data/sample_builder.h"

namespace dhp {

struct DataPipelineOptions {
  std::string data_root = ".";
  std::string tokenizer_path;  // empty: see the file comment
  // true: samples that fail to build are skipped and counted (DataLoader::skipped()); false:
  // the step fails with the sample's error.
  bool skip_invalid_samples = true;
};

// `path` under `root`, unless `path` is absolute or empty or `root` is empty or ".".
std::string ResolveDataPath(const std::string& root, const std::string& path);

class DataPipeline {
 public:
  // Errors: a tokenizer that is missing or does not belong to the preset, unreadable datasets
  // (naming the file), unknown dataset names.
  static absl::StatusOr<std::unique_ptr<DataPipeline>> Create(const v1::JobSpec& spec,
                                                              const ModelPreset& preset,
                                                              const DataPipelineOptions& options);

  // A loader over the mix seeded with training.seed that builds shard `shard_index` of
  // `num_shards` of every global batch (DataLoader's sharding).
  std::unique_ptr<data::DataLoader> MakeLoader(int shard_index = 0, int num_shards = 1) const;

  // Packing into sequences of at most data.max_seq_len tokens, with the preset's image tokens.
  data::PackingOptions packing() const { return packing_; }

  const data::DatasetMix& mix() const { return *mix_; }
  const data::BpeTokenizer& tokenizer() const { return *tokenizer_; }
  // What was loaded (datasets, sizes, skipped records), one line each, for the caller to log.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  DataPipeline() = default;
  absl::Status Init(const v1::JobSpec& spec, const ModelPreset& preset,
                    const DataPipelineOptions& options);

  std::unique_ptr<data::BpeTokenizer> tokenizer_;
  std::unique_ptr<data::ChatTemplate> chat_template_;
  std::unique_ptr<data::SampleBuilder> builder_;
  std::unique_ptr<data::DatasetMix> mix_;
  data::DataLoaderOptions loader_options_;
  data::PackingOptions packing_;
  std::vector<std::string> notes_;
};

}  // namespace dhp

#endif  // DHP_WORKER_RANK_DATA_PIPELINE_H_
