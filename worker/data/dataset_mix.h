// Named datasets and a weighted mix of them with a deterministic, epoch-aware sample order.
//
// A DatasetRegistry maps names to sources (annotation file, image root, weight), as the job
// spec's `data.registry` does. A DatasetMix loads the records of the chosen datasets and defines
// the order of one epoch from (seed, epoch):
//   - an epoch has N = the total number of records of the mixed datasets (so a single dataset's
//     epoch visits each of its records exactly once);
//   - dataset i gets n_i = N * w_i / sum(w) of those draws (largest remainder rounding), so
//     weights are relative sampling rates, whatever the dataset sizes;
//   - dataset i's draws come from an endless stream of its records, a fresh seeded permutation
//     per pass; epoch e takes the n_i draws after those of epochs 0..e-1, so a down-weighted
//     dataset still cycles through all its records over the epochs;
//   - the draws of all datasets are then shuffled together with a seed from (seed, epoch).
// Nothing depends on the standard library's random distributions: orders are identical on every
// build.
//
// Thread-safety: a DatasetMix is immutable after Load(); EpochOrder() may run concurrently.
#ifndef DHP_WORKER_DATA_DATASET_MIX_H_
#define DHP_WORKER_DATA_DATASET_MIX_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/llava_annotations.h"

namespace dhp {
namespace data {

struct DatasetSource {
  std::string annotation_path;  // LLaVA JSON array or JSONL
  std::string image_root;       // image paths in the annotations are relative to this
  double weight = 1.0;          // relative sampling weight in a mix
};

class DatasetRegistry {
 public:
  // Errors: empty or duplicate name, empty annotation path, negative or non-finite weight.
  absl::Status Register(const std::string& name, DatasetSource source);
  // Errors: unknown name (the message lists the known ones).
  absl::StatusOr<DatasetSource> Find(const std::string& name) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, DatasetSource> sources_;
};

// One draw of an epoch: record `index` of dataset `dataset` (position in the mix).
struct SampleRef {
  int dataset = 0;
  int64_t index = 0;
  bool operator==(const SampleRef& o) const { return dataset == o.dataset && index == o.index; }
};

class DatasetMix {
 public:
  struct Dataset {
    std::string name;
    DatasetSource source;
    std::vector<LlavaRecord> records;
  };

  // Loads the named datasets. Errors: unknown names, unreadable or invalid annotation files
  // (see LoadLlavaAnnotations; with `skipped` non-null invalid records are skipped and reported
  // there), a dataset without records, all weights zero.
  static absl::StatusOr<DatasetMix> Load(const DatasetRegistry& registry,
                                         const std::vector<std::string>& names,
                                         std::vector<absl::Status>* skipped = nullptr);

  // A mix of already loaded datasets (tests, tools).
  static absl::StatusOr<DatasetMix> FromDatasets(std::vector<Dataset> datasets);

  // The draws of `epoch` (0-based), in training order.
  std::vector<SampleRef> EpochOrder(uint64_t seed, int64_t epoch) const;

  int64_t epoch_size() const { return epoch_size_; }
  const std::vector<Dataset>& datasets() const { return datasets_; }
  const LlavaRecord& record(const SampleRef& ref) const {
    return datasets_[ref.dataset].records[ref.index];
  }
  const std::string& image_root(const SampleRef& ref) const {
    return datasets_[ref.dataset].source.image_root;
  }

 private:
  std::vector<Dataset> datasets_;
  std::vector<int64_t> draws_per_epoch_;  // n_i
  int64_t epoch_size_ = 0;
};

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_DATASET_MIX_H_
