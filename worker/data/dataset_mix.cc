#include "worker/data/dataset_mix.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/data/rng.h"

namespace dhp {
namespace data {

absl::Status DatasetRegistry::Register(const std::string& name, DatasetSource source) {
  if (name.empty()) return absl::InvalidArgumentError("dataset registry: empty dataset name");
  if (source.annotation_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset \"", name, "\": annotation_path is empty"));
  }
  if (!std::isfinite(source.weight) || source.weight < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset \"", name, "\": weight ", source.weight, " must be >= 0"));
  }
  if (!sources_.emplace(name, std::move(source)).second) {
    return absl::AlreadyExistsError(absl::StrCat("dataset \"", name, "\" is registered twice"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DatasetSource> DatasetRegistry::Find(const std::string& name) const {
  auto it = sources_.find(name);
  if (it == sources_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown dataset \"", name, "\"; the registry has: ",
                                            absl::StrJoin(Names(), ", ")));
  }
  return it->second;
}

std::vector<std::string> DatasetRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, source] : sources_) names.push_back(name);
  return names;
}

absl::StatusOr<DatasetMix> DatasetMix::Load(const DatasetRegistry& registry,
                                            const std::vector<std::string>& names,
                                            std::vector<absl::Status>* skipped) {
  if (names.empty()) return absl::InvalidArgumentError("data: no datasets named");
  std::vector<Dataset> datasets;
  for (const std::string& name : names) {
    absl::StatusOr<DatasetSource> source = registry.Find(name);
    if (!source.ok()) return source.status();
    absl::StatusOr<std::vector<LlavaRecord>> records =
        LoadLlavaAnnotations(source->annotation_path, skipped);
    if (!records.ok()) return records.status();
    datasets.push_back({name, *source, std::move(*records)});
  }
  return FromDatasets(std::move(datasets));
}

absl::StatusOr<DatasetMix> DatasetMix::FromDatasets(std::vector<Dataset> datasets) {
  DatasetMix mix;
  double total_weight = 0;
  int64_t total_records = 0;
  for (const Dataset& d : datasets) {
    if (d.records.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset \"", d.name, "\" (", d.source.annotation_path, ") has no valid records"));
    }
    total_weight += d.source.weight;
    total_records += static_cast<int64_t>(d.records.size());
  }
  if (datasets.empty() || !(total_weight > 0)) {
    return absl::InvalidArgumentError("data: the mix is empty or all its weights are 0");
  }
  // Largest-remainder apportionment of the epoch's draws by weight.
  std::vector<double> remainder(datasets.size());
  int64_t assigned = 0;
  for (size_t i = 0; i < datasets.size(); ++i) {
    const double quota = total_records * (datasets[i].source.weight / total_weight);
    const int64_t n = static_cast<int64_t>(std::floor(quota));
    mix.draws_per_epoch_.push_back(n);
    remainder[i] = quota - n;
    assigned += n;
  }
  std::vector<size_t> order(datasets.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t k = 0; assigned < total_records; k = (k + 1) % order.size()) {
    if (datasets[order[k]].source.weight > 0) {
      ++mix.draws_per_epoch_[order[k]];
      ++assigned;
    }
  }
  mix.epoch_size_ = total_records;
  mix.datasets_ = std::move(datasets);
  return mix;
}

std::vector<SampleRef> DatasetMix::EpochOrder(uint64_t seed, int64_t epoch) const {
  std::vector<SampleRef> refs;
  refs.reserve(epoch_size_);
  for (size_t d = 0; d < datasets_.size(); ++d) {
    const int64_t size = static_cast<int64_t>(datasets_[d].records.size());
    const int64_t n = draws_per_epoch_[d];
    const uint64_t dataset_seed = Rng::Mix(seed, d);
    std::vector<int64_t> perm;
    int64_t perm_pass = -1;
    for (int64_t p = epoch * n; p < (epoch + 1) * n; ++p) {
      const int64_t pass = p / size;
      if (pass != perm_pass) {
        perm.resize(size);
        std::iota(perm.begin(), perm.end(), 0);
        Rng rng(Rng::Mix(dataset_seed, static_cast<uint64_t>(pass)));
        rng.Shuffle(&perm);
        perm_pass = pass;
      }
      refs.push_back({static_cast<int>(d), perm[p % size]});
    }
  }
  Rng rng(Rng::Mix(Rng::Mix(seed, 0x6D6978ull /* "mix" */), static_cast<uint64_t>(epoch)));
  rng.Shuffle(&refs);
  return refs;
}

}  // namespace data
}  // namespace dhp
