#include "worker/rank/dist_data.h"

#include <chrono>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_layout.h"
#include "worker/data/packing.h"
#include "worker/model/torch_status.h"
#include "worker/rank/batch.h"

namespace dhp {

absl::StatusOr<std::unique_ptr<DistData>> DistData::Create(const v1::JobSpec& spec,
                                                           const ModelPreset& preset,
                                                           const DataPipelineOptions& options,
                                                           const at::Device& device,
                                                           int replica) {
  const comm::Layout layout = LayoutForSpec(spec);
  if (layout.dp < 1 || spec.training().batch_size() < layout.dp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.batch_size ", spec.training().batch_size(), " gives no sample to some of the ",
        layout.dp, " data-parallel replicas; use at least one sample per replica"));
  }
  if (replica < -1 || replica >= layout.dp) {
    return absl::InvalidArgumentError(absl::StrCat("data-parallel replica ", replica,
                                                   " is outside [0, ", layout.dp, ")"));
  }
  std::unique_ptr<DistData> d(new DistData());
  d->spec_ = spec;
  d->device_ = device;
  d->replicas_ = layout.dp;
  d->replica_ = replica;
  absl::StatusOr<std::unique_ptr<DataPipeline>> pipeline =
      DataPipeline::Create(spec, preset, options);
  if (!pipeline.ok()) return pipeline.status();
  d->pipeline_ = std::move(*pipeline);
  for (int r = 0; r < layout.dp; ++r) {
    if (replica != -1 && r != replica) continue;
    d->loaders_.push_back(d->pipeline_->MakeLoader(r, layout.dp));
    d->loader_replica_.push_back(r);
  }
  return d;
}

data::DataPosition DistData::position() const { return loaders_.front()->position(); }

void DistData::Seek(const data::DataPosition& position) {
  for (auto& loader : loaders_) loader->Seek(position);
}

int64_t DistData::micro_batch_size() const {
  const int64_t share = spec_.training().batch_size() / replicas();
  const int64_t micro = spec_.training().micro_batch_size();
  return micro >= 1 && micro <= share ? micro : share;
}

absl::StatusOr<DistBatch> DistData::Next(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string where = absl::StrCat("step ", step);
  const int64_t global = spec_.training().batch_size();
  const int64_t n = global / replicas() / micro_batch_size();  // micro-batches per replica
  DistBatch out;
  out.batches.assign(replicas(), std::vector<PackedBatch>(n));  // placeholders
  for (size_t l = 0; l < loaders_.size(); ++l) {
    const int r = loader_replica_[l];
    data::DataLoader& loader = *loaders_[l];
    absl::StatusOr<std::vector<data::TrainingSample>> samples = loader.NextBatch(global);
    if (!samples.ok()) {
      return absl::Status(samples.status().code(),
                          absl::StrCat(where, ": data: ", samples.status().message()));
    }
    if (samples->empty()) {
      const auto& errs = loader.skipped_errors();
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": every sample of data-parallel replica ", r, "'s share failed to build",
          errs.empty() ? "" : absl::StrCat(" (last: ", errs.back(), ")")));
    }
    const int64_t m = static_cast<int64_t>(samples->size());
    if (m < n) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": only ", m, " of data-parallel replica ", r, "'s ", global / replicas(),
          " samples built, fewer than its ", n, " micro-batches (training.micro_batch_size ",
          micro_batch_size(), ")"));
    }
    std::vector<PackedBatch>& replica = out.batches[r];
    for (int64_t k = 0; k < n; ++k) {  // samples [k m / n, (k + 1) m / n)
      std::vector<data::TrainingSample> part(
          std::make_move_iterator(samples->begin() + k * m / n),
          std::make_move_iterator(samples->begin() + (k + 1) * m / n));
      const std::string what = absl::StrCat("micro-batch ", k + 1, " of ", n,
                                            " of data-parallel replica ", r);
      absl::StatusOr<PackedBatch> batch = PackMicroBatch(std::move(part), where, what, &out);
      if (!batch.ok()) return batch.status();
      replica[k] = std::move(*batch);
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

absl::StatusOr<PackedBatch> DistData::PackMicroBatch(std::vector<data::TrainingSample> samples,
                                                     const std::string& where,
                                                     const std::string& what, DistBatch* out) {
  const data::PackingOptions packing = pipeline_->packing();
  const int64_t n = static_cast<int64_t>(samples.size());
  int64_t tokens = 0;
  for (const data::TrainingSample& s : samples) tokens += static_cast<int64_t>(s.input_ids.size());
  absl::StatusOr<std::vector<data::PackedSequence>> packs =
      data::PackSamples(std::move(samples), packing);
  if (!packs.ok()) {
    return absl::Status(packs.status().code(),
                        absl::StrCat(where, ": packing: ", packs.status().message()));
  }
  if (packs->size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", what, " (", n, " samples, ", tokens,
        " tokens) does not fit one packed sequence of data.max_seq_len = ", packing.max_tokens,
        " tokens, and the distributed step trains each micro-batch as exactly one packed "
        "sequence: raise data.max_seq_len to at least ", tokens,
        ", or lower training.micro_batch_size (", micro_batch_size(),
        " samples per micro-batch per replica; training.batch_size ", spec_.training().batch_size(),
        ", data_parallel_size ", replicas(), ")"));
  }
  const data::PackedSequence& p = packs->front();
  out->samples += p.num_samples();
  out->tokens += p.num_tokens();
  out->image_tokens += CountImageTokens(p, packing.spatial_merge_size);
  out->loss_tokens += CountLossTargets(p);
  out->patches += p.num_patches;
  return CatchTorch(where, [&] { return ToPackedBatch(p, device_); });
}

}  // namespace dhp
