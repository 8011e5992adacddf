#include "worker/data/data_loader.h"

namespace dhp {
namespace data {

DataLoader::DataLoader(const DatasetMix& mix, const SampleBuilder& builder,
                       DataLoaderOptions options)
    : mix_(&mix), builder_(&builder), options_(options) {
  if (options_.num_shards < 1) options_.num_shards = 1;
}

void DataLoader::Seek(DataPosition position) { position_ = position; }

SampleRef DataLoader::NextRef() {
  if (position_.offset >= mix_->epoch_size()) {
    ++position_.epoch;
    position_.offset = 0;
  }
  if (order_epoch_ != position_.epoch) {
    order_ = mix_->EpochOrder(options_.seed, position_.epoch);
    order_epoch_ = position_.epoch;
  }
  return order_[position_.offset++];
}

absl::StatusOr<std::vector<TrainingSample>> DataLoader::NextBatch(int64_t global_batch) {
  std::vector<TrainingSample> out;
  for (int64_t i = 0; i < global_batch; ++i) {
    const SampleRef ref = NextRef();
    if (i % options_.num_shards != options_.shard_index) continue;
    absl::StatusOr<TrainingSample> sample =
        builder_->Build(mix_->record(ref), mix_->image_root(ref));
    if (sample.ok()) {
      out.push_back(std::move(*sample));
      continue;
    }
    if (!options_.skip_invalid) return sample.status();
    ++skipped_;
    if (static_cast<int>(errors_.size()) < options_.max_reported_errors) {
      errors_.emplace_back(sample.status().message());
    }
  }
  return out;
}

}  // namespace data
}  // namespace dhp
