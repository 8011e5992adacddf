#include "worker/rank/dist_data.h"

#include <chrono>
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
                                                           const at::Device& device) {
  const comm::Layout layout = LayoutForSpec(spec);
  if (layout.dp < 1 || spec.training().batch_size() < layout.dp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.batch_size ", spec.training().batch_size(), " gives no sample to some of the ",
        layout.dp, " data-parallel replicas; use at least one sample per replica"));
  }
  std::unique_ptr<DistData> d(new DistData());
  d->spec_ = spec;
  d->device_ = device;
  absl::StatusOr<std::unique_ptr<DataPipeline>> pipeline =
      DataPipeline::Create(spec, preset, options);
  if (!pipeline.ok()) return pipeline.status();
  d->pipeline_ = std::move(*pipeline);
  for (int r = 0; r < layout.dp; ++r) d->loaders_.push_back(d->pipeline_->MakeLoader(r, layout.dp));
  return d;
}

data::DataPosition DistData::position() const { return loaders_.front()->position(); }

void DistData::Seek(const data::DataPosition& position) {
  for (auto& loader : loaders_) loader->Seek(position);
}

absl::StatusOr<DistBatch> DistData::Next(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string where = absl::StrCat("step ", step);
  const int64_t global = spec_.training().batch_size();
  const data::PackingOptions packing = pipeline_->packing();
  DistBatch out;
  for (int r = 0; r < replicas(); ++r) {
    data::DataLoader& loader = *loaders_[r];
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
    const int64_t n = static_cast<int64_t>(samples->size());
    int64_t tokens = 0;
    for (const data::TrainingSample& s : *samples) tokens += static_cast<int64_t>(s.input_ids.size());
    absl::StatusOr<std::vector<data::PackedSequence>> packs =
        data::PackSamples(std::move(*samples), packing);
    if (!packs.ok()) {
      return absl::Status(packs.status().code(),
                          absl::StrCat(where, ": packing: ", packs.status().message()));
    }
    if (packs->size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": data-parallel replica ", r, "'s share of the batch (", n, " samples, ", tokens,
          " tokens) does not fit one packed sequence of data.max_seq_len = ", packing.max_tokens,
          " tokens, and the distributed step trains exactly one packed sequence per replica (no "
          "gradient accumulation): raise data.max_seq_len to at least ", tokens,
          ", or lower training.batch_size (", global, ") or raise data_parallel_size (",
          replicas(), ")"));
    }
    const data::PackedSequence& p = packs->front();
    out.samples += p.num_samples();
    out.tokens += p.num_tokens();
    out.image_tokens += CountImageTokens(p, packing.spatial_merge_size);
    out.loss_tokens += CountLossTargets(p);
    out.patches += p.num_patches;
    absl::StatusOr<PackedBatch> batch =
        CatchTorch(where, [&] { return ToPackedBatch(p, device_); });
    if (!batch.ok()) return batch.status();
    out.batches.push_back(std::move(*batch));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace dhp
