#include "worker/rank/job_rank.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_layout.h"
#include "common/layout.h"
#include "common/model_presets.h"
#include "common/proto_yaml.h"
#include "common/rank_exit.h"
#include "common/spec_validate.h"
#include "worker/ckpt/rank_state_format.h"
#include "worker/ckpt/tensor_shard.h"
#include "worker/comm/process_groups.h"
#include "worker/model/torch_status.h"
#include "worker/rank/data_roots.h"
#include "worker/rank/device_stats.h"
#include "worker/rank/dist_data.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/model_init.h"
#include "worker/rank/rank_checkpoint.h"
#include "worker/rank/reshard.h"
#include "worker/rank/rank_metrics.h"
#include "worker/rank/step_flops.h"
#include "worker/rank/training_config.h"

namespace dhp {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Model FLOPs of a global batch (every micro-batch of every replica).
absl::StatusOr<StepFlops> CountBatchFlops(const ModelPreset& preset, const DistBatch& batch) {
  std::vector<GridThw> images;
  std::vector<int64_t> lengths;
  for (const std::vector<PackedBatch>& replica : batch.batches) {
    for (const PackedBatch& b : replica) {
      if (!b.input_ids.defined()) continue;  // another replica's placeholder (dist_data.h)
      images.insert(images.end(), b.image_grids.begin(), b.image_grids.end());
      if (b.cu_seqlens.size() < 2) {
        lengths.push_back(b.input_ids.numel());
      } else {
        for (size_t i = 1; i < b.cu_seqlens.size(); ++i) {
          lengths.push_back(b.cu_seqlens[i] - b.cu_seqlens[i - 1]);
        }
      }
    }
  }
  return CountStepFlops(preset, images, lengths);
}

// "rank 1: <context>: <message>", keeping the code.
absl::Status Annotate(const absl::Status& s, const std::string& prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, ": ", s.message()));
}

class JobRank {
 public:
  JobRank(const JobDescription& job, const JobRankOptions& options, comm::KvClient& kv,
          RankControl& control)
      : job_(job), options_(options), kv_(kv), control_(control),
        me_(absl::StrCat("rank ", options.world_rank)) {
    if (!options_.out) {
      options_.out = [](const std::string& line) {
        std::fputs((line + "\n").c_str(), stdout);
        std::fflush(stdout);
      };
    }
    if (!options_.log) {
      options_.log = [](const std::string& line) {
        std::fputs((line + "\n").c_str(), stderr);
      };
    }
    if (!options_.sleep) {
      options_.sleep = [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
    }
  }

  absl::StatusOr<JobRankResult> Run() {
    try {
      return RunImpl();
    } catch (const c10::Error& e) {  // the rank's boundary: LibTorch errors become Statuses
      return TorchErrorToStatus(e, me_);
    }
  }

 private:
  absl::StatusOr<JobRankResult> RunImpl();
  // Reads and checks this rank's shard of job_.resume, or notes that the checkpoint was written
  // by another layout (resharded_ is then opened after Build); false when it was rejected.
  bool ReadResumeShard();
  // Opens job_.resume for resharding into this rank's layout (reshard.h). False when a shard it
  // reads was rejected (missing, corrupt); an error when the layout change is not possible.
  absl::StatusOr<bool> OpenResharded();
  // Tells the controller (best effort: the exit code tells the agent too); returns false.
  bool Reject(const std::string& reason);
  absl::Status Build();
  absl::Status Restore();
  // Snapshots the state at `step` and hands it to writer_ (which writes and reports it in the
  // background, or now when checkpoint.async_write is false).
  absl::Status SaveCheckpoint(int64_t step);
  // Logs the checkpoints written since the last call; returns the first checkpoint failure, if
  // any (the rank fails at the step boundary that sees it). `drain`: first waits until every
  // checkpoint in flight is written and reported (each path that ends the rank after training:
  // the controller must hold them before the rank exits).
  absl::Status CheckCheckpoints(bool drain);
  // What every rank learns at the end of a step, agreed in one all-reduce (max) over "world":
  // whether any rank was told to stop, and whether any was asked for a checkpoint now that
  // this attempt has not written yet.
  struct BoundaryAgreement {
    bool stop = false;
    bool checkpoint = false;
    bool preempt = false;
  };
  absl::StatusOr<BoundaryAgreement> AgreeAtStepBoundary();
  int CudaIndex() const { return device_.has_index() ? device_.index() : 0; }
  // Sets peak_flops_ (MFU's denominator) and returns the note that says where it came from.
  std::string ChoosePeakFlops();
  // Sums this replica's counters of `batch` (DistData builds only its own replica) and, when
  // MFU is on, the step's model FLOPs over the replicas: one all-reduce of 10 int64 over
  // "world" (none with one replica). Collective: every rank calls it once per step.
  absl::Status GlobalizeCounts(DistBatch* batch);
  // The step's metrics (RankStepMetrics) with MFU and, on a GPU, the allocator's counters.
  std::map<std::string, double> StepMetrics(const DistBatch& batch, const DistStepResult& r,
                                            double seconds);
  // From the training thread, and from the checkpoint writer's (a report's long outage).
  void Log(const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu_);
    options_.log(absl::StrCat(me_, ": ", line));
  }
  // How long the last progress report may take to reach the controller before the rank ends.
  std::chrono::milliseconds FlushTimeout() const {
    return std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(30));
  }

  const JobDescription& job_;
  JobRankOptions options_;
  comm::KvClient& kv_;
  RankControl& control_;
  const std::string me_;
  std::mutex log_mu_;  // guards the calls of options_.log

  comm::Layout layout_;
  ModelPreset preset_;  // the spec's preset, or its model directory's config.json
  at::Device device_ = at::kCPU;
  double peak_flops_ = 0;  // per second, per device; 0: no MFU
  bool warned_flops_ = false;
  std::optional<StepFlops> step_flops_;  // the last step's model FLOPs over all replicas
  TrainingConfig config_;
  std::optional<ckpt::LoadedShard> resume_;
  int64_t last_checkpoint_step_ = -1;  // written by this attempt or resumed from
  ckpt::RankStateMeta resume_meta_;  // resume_'s metadata
  bool reshard_ = false;             // job_.resume was written by another layout
  std::unique_ptr<ReshardedState> resharded_;
  std::unique_ptr<DistData> data_;
  std::unique_ptr<comm::ProcessGroups> groups_;
  std::unique_ptr<comm::Communicator> handoff_;
  std::unique_ptr<DistTrainer> trainer_;
  bool warned_no_checkpoint_dir_ = false;
  bool async_checkpoints_ = true;  // checkpoint.async_write
  // Last: destroyed (drained) first, while everything its tasks and reports use is alive.
  std::unique_ptr<CheckpointWriter> writer_;
};

absl::StatusOr<JobRankResult> JobRank::RunImpl() {
  const v1::JobSpec& spec = job_.spec;
  layout_ = LayoutForSpec(spec);
  if (absl::Status s = layout_.Validate(); !s.ok()) return Annotate(s, me_ + ": job layout");
  if (options_.world_size != layout_.WorldSize()) {
    return absl::InvalidArgumentError(absl::StrCat(
        me_, ": --world-size ", options_.world_size, " does not match the job's layout (",
        layout_.DebugString(), "), which has ", layout_.WorldSize(), " ranks"));
  }
  if (options_.checkpoints_in_flight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(me_, ": checkpoints in flight ", options_.checkpoints_in_flight,
                     " must be at least 1 (--checkpoints-in-flight)"));
  }
  if (options_.world_rank < 0 || options_.world_rank >= layout_.WorldSize()) {
    return absl::InvalidArgumentError(absl::StrCat(me_, ": world rank out of range 0..",
                                                   layout_.WorldSize() - 1));
  }
  // The controller cannot read model directories: the architecture (and the stage degrees'
  // checks against it) are settled here, where model.weights_path is readable.
  const SpecOptions spec_options = RankSpecOptions(options_.data_root);
  v1::JobSpec checked = spec;
  if (absl::Status s = NormalizeAndValidateSpec(&checked, spec_options); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(me_, ": ", s.message()));
  }
  if (options_.confine_data_paths) {
    const DataRootPolicy roots{options_.data_root, options_.extra_data_roots, false};
    if (absl::Status s = CheckSpecDataPaths(spec, roots); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(me_, ": ", s.message()));
    }
  }
  absl::StatusOr<ModelPreset> preset = ResolveSpecModel(spec, spec_options);
  if (!preset.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(me_, ": ", preset.status().message()));
  }
  preset_ = *std::move(preset);
  if (job_.resume.has_value()) {
    if (!ReadResumeShard()) return JobRankResult{JobRankEnd::kCheckpointRejected, 0};
  } else if (job_.run.start_step() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        me_, ": run ", job_.run.attempt(), " starts at step ", job_.run.start_step(),
        " but names no checkpoint to resume from (resume_checkpoint_id 0)"));
  }
  if (absl::Status s = Build(); !s.ok()) return s;
  if (reshard_) {
    absl::StatusOr<bool> opened = OpenResharded();
    if (!opened.ok()) return opened.status();
    if (!*opened) return JobRankResult{JobRankEnd::kCheckpointRejected, 0};
  }
  if (job_.resume.has_value()) {
    if (absl::Status s = Restore(); !s.ok()) return s;
  }

  const int64_t total = config_.max_steps;
  const int64_t every = job_.spec.checkpoint().every_steps();
  const bool has_text = groups_->text_coord().has_value();
  JobRankResult result;
  result.last_step = trainer_->steps_done();
  if (job_.resume.has_value()) last_checkpoint_step_ = trainer_->steps_done();
  for (int64_t step = trainer_->steps_done() + 1; step <= total; ++step) {
    const std::string where = absl::StrCat(me_, ": step ", step);
    control_.StepStarted(step);
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<DistBatch> batch = data_->Next(step);
    if (!batch.ok()) return Annotate(batch.status(), me_);
    if (absl::Status s = GlobalizeCounts(&*batch); !s.ok()) return Annotate(s, where);
    absl::StatusOr<DistStepResult> r = trainer_->Step(batch->batches);
    if (!r.ok()) return Annotate(r.status(), where);
    const double seconds = SecondsSince(t0);
    // The global norm is the same on every rank, so every rank stops here together.
    if (!std::isfinite(r->grad_norm)) {
      return absl::InternalError(absl::StrCat(
          where, ": loss ", has_text ? absl::StrCat(r->loss) : "-", ", gradient norm ",
          r->grad_norm, " is not finite; lower training.learning_rate or check the data"));
    }
    RankStepProgress p;
    p.step = step;
    p.loss = has_text ? r->loss : std::numeric_limits<double>::quiet_NaN();
    p.total_steps = total;
    p.step_seconds = seconds;
    p.tokens_per_second = seconds > 0 ? static_cast<double>(batch->tokens) / seconds : 0;
    p.metrics = StepMetrics(*batch, *r, seconds);
    options_.out(absl::StrFormat(
        "step %d/%d loss %s lr %g grad_norm %g tokens_per_s %g step_s %g", step, total,
        has_text ? absl::StrFormat("%.17g", r->loss) : std::string("-"), r->lr, r->grad_norm,
        p.tokens_per_second, seconds));
    control_.StepFinished(p);
    result.last_step = step;
    if (absl::Status s = CheckCheckpoints(/*drain=*/false); !s.ok()) return s;
    absl::StatusOr<BoundaryAgreement> agreed = AgreeAtStepBoundary();
    if (!agreed.ok()) return Annotate(agreed.status(), where);
    const bool periodic = step == total || (every > 0 && step % every == 0);
    if (periodic || agreed->checkpoint || agreed->preempt) {
      if (agreed->preempt) {
        Log(absl::StrCat("preempted (SIGTERM or drain",
                         control_.preempt_requested() ? ", here" : ", on another rank",
                         "): checkpoint at step ", step, ", then exiting"));
      } else if (!periodic) {
        Log(absl::StrCat("checkpoint now at step ", step, ", as a rank was asked (at step ",
                         control_.checkpoint_requested_at(), " or later, on this rank)"));
      }
      if (absl::Status s = SaveCheckpoint(step); !s.ok()) return s;
      last_checkpoint_step_ = step;
    }
    if (agreed->preempt && step != total) {
      // Every shard is reported once all ranks pass this barrier: the controller holds the
      // checkpoint COMPLETE before the first rank's exit can end the run.
      if (absl::Status s = CheckCheckpoints(/*drain=*/true); !s.ok()) return s;
      if (absl::Status s = groups_->world().Barrier(); !s.ok()) return Annotate(s, where);
      control_.Flush(FlushTimeout());
      result.end = JobRankEnd::kPreempted;
      return result;
    }
    if (step == total) break;
    if (agreed->stop) {
      Log(absl::StrCat("stopping after step ", step, " as the controller asked"));
      if (absl::Status s = CheckCheckpoints(/*drain=*/true); !s.ok()) return s;
      control_.Flush(FlushTimeout());
      result.end = JobRankEnd::kStopped;
      return result;
    }
  }
  if (absl::Status s = CheckCheckpoints(/*drain=*/true); !s.ok()) return s;
  control_.Flush(FlushTimeout());
  result.end = JobRankEnd::kFinished;
  return result;
}

bool JobRank::ReadResumeShard() {
  const v1::Checkpoint& c = *job_.resume;
  if (c.world_size() != 0 && c.world_size() != layout_.WorldSize()) {
    reshard_ = true;  // another layout wrote it
    return true;
  }
  const v1::CheckpointShard* shard = nullptr;
  for (const v1::CheckpointShard& s : c.shards()) {
    if (s.rank() == options_.world_rank) shard = &s;
  }
  if (shard == nullptr) {
    return Reject(absl::StrCat("checkpoint ", c.id(), " (", c.path(),
                               ") lists no shard for rank ", options_.world_rank));
  }
  ckpt::ShardInfo expected{shard->file(), shard->size_bytes(), shard->crc32c()};
  absl::StatusOr<ckpt::LoadedShard> loaded = ckpt::ReadTensorShard(c.path(), expected);
  if (!loaded.ok()) return Reject(std::string(loaded.status().message()));
  const std::string where = absl::StrCat(c.path(), "/", shard->file());
  absl::StatusOr<ckpt::RankStateMeta> meta =
      ckpt::RankStateMeta::FromMetadata(loaded->metadata, where);
  if (!meta.ok()) return Reject(std::string(meta.status().message()));
  if (absl::Status s = meta->CheckWorldRank(options_.world_rank, where); !s.ok()) {
    return Reject(std::string(s.message()));
  }
  if (meta->layout != layout_.DebugString()) {
    reshard_ = true;  // the same number of ranks, another layout
    return true;
  }
  resume_meta_ = *std::move(meta);
  resume_ = std::move(*loaded);
  return true;
}

absl::StatusOr<bool> JobRank::OpenResharded() {
  const v1::Checkpoint& c = *job_.resume;
  const Zero1AdamW* zero = trainer_->vision_optimizer();
  absl::StatusOr<std::unique_ptr<ReshardedState>> r = ReshardedState::Open(
      c, preset_, layout_, options_.world_rank, zero != nullptr ? zero->full_numel() : 0);
  if (!r.ok()) {
    const absl::StatusCode code = r.status().code();
    if (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kDataLoss) {
      return Reject(std::string(r.status().message()));
    }
    return Annotate(r.status(), absl::StrCat(me_, ": resuming from checkpoint ", c.id(), " (",
                                             c.path(), ")"));
  }
  resharded_ = *std::move(r);
  resume_meta_ = resharded_->meta();
  return true;
}

bool JobRank::Reject(const std::string& reason) {
  const v1::Checkpoint& c = *job_.resume;
  Log(absl::StrCat("rejecting checkpoint ", c.id(), " (step ", c.step(), "): ", reason));
  v1::RejectCheckpointRequest req;
  req.set_job_id(options_.job_id);
  req.set_attempt(options_.attempt);
  req.set_checkpoint_id(c.id());
  req.set_rank(options_.world_rank);
  req.set_reason(reason);
  absl::Status s = RetryWhileUnavailable([&] { return control_.RejectCheckpoint(req); },
                                         options_.timeout, options_.sleep);
  // The exit code tells the agent as well; a controller that did not hear it is only logged.
  if (!s.ok()) Log(absl::StrCat("RejectCheckpoint failed: ", s.ToString()));
  return false;
}

absl::Status JobRank::Build() {
  const v1::JobSpec& spec = job_.spec;
  absl::StatusOr<at::Device> device = ParseTrainingDevice(options_.device);
  if (!device.ok()) return Annotate(device.status(), me_);
  device_ = *device;
  DataPipelineOptions data_options;
  data_options.data_root = options_.data_root;
  data_options.tokenizer_path = options_.tokenizer_path;
  // Only this rank's replica's samples are built (every rank belongs to exactly one).
  std::optional<comm::StageCoord> coord = comm::VisionCoord(layout_, options_.world_rank);
  if (!coord.has_value()) coord = comm::TextCoord(layout_, options_.world_rank);
  const int replica = coord.has_value() ? coord->replica : -1;
  absl::StatusOr<std::unique_ptr<DistData>> data =
      DistData::Create(spec, preset_, data_options, device_, replica);
  if (!data.ok()) return Annotate(data.status(), me_ + ": data");
  data_ = std::move(*data);
  absl::StatusOr<TrainingConfig> config =
      TrainingConfigForSpec(spec, data_->pipeline().mix().epoch_size());
  if (!config.ok()) return Annotate(config.status(), me_);
  config_ = std::move(*config);
  std::vector<std::string> notes = data_->pipeline().notes();
  notes.insert(notes.end(), config_.notes.begin(), config_.notes.end());
  // Shard-first: the trainer reads only this rank's slices (initialised or from the checkpoint),
  // straight onto the device; no rank builds the full model.
  absl::StatusOr<std::unique_ptr<TensorSource>> source = CreateModelSource(
      spec, preset_, options_.data_root, at::TensorOptions().device(device_), &notes);
  if (!source.ok()) return Annotate(source.status(), me_);

  comm::ProcessGroupsOptions po;
  po.backend = device_.is_cuda() ? comm::CommBackend::kNccl : comm::CommBackend::kGloo;
  po.ns = options_.kv_namespace;
  po.arrival_timeout = options_.timeout;
  po.store_timeout = options_.timeout;
  // restart.collective_timeout_s: a dead peer fails the collective, naming it, well before the
  // controller's stall check (specs stored before the field existed keep --timeout).
  po.collective_timeout = spec.restart().has_collective_timeout_s()
                              ? std::chrono::seconds(spec.restart().collective_timeout_s())
                              : std::chrono::duration_cast<std::chrono::seconds>(options_.timeout);
  absl::StatusOr<std::unique_ptr<comm::ProcessGroups>> groups =
      comm::ProcessGroups::Create(kv_, layout_, options_.world_rank, po);
  if (!groups.ok()) return Annotate(groups.status(), me_ + ": process groups");
  groups_ = std::move(*groups);
  comm::GroupSpec all{kHandoffGroup, std::vector<int>(layout_.WorldSize())};
  std::iota(all.world_ranks.begin(), all.world_ranks.end(), 0);
  absl::StatusOr<std::unique_ptr<comm::Communicator>> handoff =
      comm::CreateCommunicator(kv_, all, options_.world_rank, po, &groups_->stats());
  if (!handoff.ok()) return Annotate(handoff.status(), me_ + ": hand-off group");
  handoff_ = std::move(*handoff);

  DistTrainerOptions to;
  to.optimizer = config_.optimizer;
  to.schedule = config_.schedule;
  to.text_activation_checkpointing = spec.text().activation_checkpointing();
  to.vision_activation_checkpointing = spec.vision().activation_checkpointing();
  to.vision_dtype = config_.vision_dtype;
  to.text_dtype = config_.text_dtype;
  to.grad_reduce_dtype = config_.grad_reduce_dtype;
  to.fp32_grad_accumulation = config_.fp32_grad_accumulation;
  absl::StatusOr<std::unique_ptr<DistTrainer>> trainer =
      DistTrainer::Create(preset_, **source, *groups_, handoff_.get(), to);
  if (!trainer.ok()) return Annotate(trainer.status(), me_);
  trainer_ = std::move(*trainer);
  std::string roles;
  if (const auto& v = groups_->vision_coord()) {
    absl::StrAppend(&roles, " vision (replica ", v->replica, ", rank ", v->inner_rank, ")");
  }
  if (const auto& t = groups_->text_coord()) {
    absl::StrAppend(&roles, " text (replica ", t->replica, ", rank ", t->inner_rank, ")");
  }
  notes.push_back(absl::StrCat("layout ", layout_.DebugString(), "; this rank hosts", roles,
                               "; ", config_.max_steps, " steps on ", device_.str()));
  notes.push_back(absl::StrCat(
      "precision: vision ", c10::toString(to.vision_dtype), ", text ",
      c10::toString(to.text_dtype), " (bf16 stages keep fp32 master weights and Adam moments), "
      "gradients reduced in ", c10::toString(to.grad_reduce_dtype), ", micro-batches summed in ",
      to.fp32_grad_accumulation ? "fp32" : "the stage's dtype"));
  notes.push_back(ChoosePeakFlops());
  // checkpoint.async_write (specs stored before the field existed: on).
  async_checkpoints_ = !spec.checkpoint().has_async_write() || spec.checkpoint().async_write();
  if (!async_checkpoints_) notes.push_back("checkpoint.async_write is off: steps wait for writes");
  // Reports are retried for as long as the controller does not answer: only the number of
  // checkpoints in flight bounds an outage (checkpoint_writer.h).
  CheckpointWriterOptions wo;
  wo.async = async_checkpoints_;
  wo.max_in_flight = options_.checkpoints_in_flight;
  wo.sleep = options_.sleep;
  wo.log = [this](const std::string& line) { Log(line); };
  writer_ = std::make_unique<CheckpointWriter>(
      [this](const v1::ReportCheckpointRequest& req) { return control_.ReportCheckpoint(req); },
      std::move(wo));
  for (const std::string& n : notes) Log(n);
  return absl::OkStatus();
}

std::string JobRank::ChoosePeakFlops() {
  if (options_.peak_tflops > 0) {
    peak_flops_ = options_.peak_tflops * 1e12;
    return absl::StrCat("MFU against a peak of ", options_.peak_tflops,
                        " TFLOP/s per device (--peak-tflops)");
  }
  if (!device_.is_cuda()) {
    return "no MFU: the peak of a CPU is not known (the agent's --peak-tflops sets one)";
  }
  const std::string name = CudaDeviceName(CudaIndex());
  peak_flops_ = KnownGpuPeakFlops(name);
  if (peak_flops_ == 0) {
    return absl::StrCat("no MFU: the dense BF16 peak of GPU \"", name,
                        "\" is not known (the agent's --peak-tflops sets one)");
  }
  return absl::StrCat("MFU against a dense BF16 peak of ", peak_flops_ / 1e12,
                      " TFLOP/s per device (", name, ")");
}

absl::Status JobRank::GlobalizeCounts(DistBatch* batch) {
  step_flops_.reset();
  StepFlops flops;
  int64_t flops_failed = 0;
  if (peak_flops_ > 0) {
    absl::StatusOr<StepFlops> local = CountBatchFlops(preset_, *batch);
    if (local.ok()) {
      flops = *local;
    } else {
      flops_failed = 1;
      if (!warned_flops_) {
        warned_flops_ = true;
        Log(absl::StrCat("no MFU: counting the step's FLOPs failed: ", local.status().message()));
      }
    }
  }
  int64_t* fields[] = {&batch->samples,       &batch->tokens,         &batch->image_tokens,
                       &batch->loss_tokens,   &batch->patches,        &flops.vision_linear,
                       &flops.vision_attention, &flops.text_linear,   &flops.text_attention,
                       &flops_failed};
  constexpr int kFields = sizeof(fields) / sizeof(fields[0]);
  if (layout_.dp > 1) {
    at::Tensor sum = at::empty({kFields}, at::kLong);
    for (int i = 0; i < kFields; ++i) sum.data_ptr<int64_t>()[i] = *fields[i];
    sum = sum.to(device_);
    if (absl::Status s = groups_->world().AllReduce(sum, comm::ReduceOp::kSum); !s.ok()) return s;
    sum = sum.to(at::kCPU);
    // Every rank of a replica adds its replica's values; every replica has as many ranks.
    const int64_t ranks_per_replica = layout_.WorldSize() / layout_.dp;
    for (int i = 0; i < kFields; ++i) *fields[i] = sum.data_ptr<int64_t>()[i] / ranks_per_replica;
  }
  if (peak_flops_ > 0 && flops_failed == 0) step_flops_ = flops;
  return absl::OkStatus();
}

std::map<std::string, double> JobRank::StepMetrics(const DistBatch& batch,
                                                   const DistStepResult& r, double seconds) {
  const RankStepTimes times{seconds, r.forward_s, r.backward_s, r.comm_s, r.optimizer_s};
  RankStepCounts counts{batch.tokens, batch.patches, groups_->vision_coord().has_value(),
                        groups_->text_coord().has_value()};
  counts.vision_ranks = layout_.VisionSize();
  counts.text_ranks = layout_.TextSize();
  counts.flops = step_flops_;
  RankDevice device;
  device.peak_flops = peak_flops_;
  if (device_.is_cuda()) device.memory = CudaAllocatorMemory(CudaIndex());
  std::map<std::string, double> m = RankStepMetrics(times, counts, groups_->stats(), device);
  m.insert({{"grad_norm", r.grad_norm},
            {"lr", r.lr},
            {"samples", static_cast<double>(batch.samples)},
            {"tokens", static_cast<double>(batch.tokens)},
            {"image_tokens", static_cast<double>(batch.image_tokens)},
            {"loss_tokens", static_cast<double>(batch.loss_tokens)},
            {"data_seconds", batch.seconds}});
  return m;
}

absl::Status JobRank::Restore() {
  const v1::Checkpoint& c = *job_.resume;
  const ckpt::RankStateMeta& meta = resume_meta_;  // parsed by ReadResumeShard
  const std::string where =
      absl::StrCat(me_, ": resuming from checkpoint ", c.id(), " (", c.path(), ")");
  const int64_t step = meta.step;
  const data::DataPosition position{meta.data_epoch, meta.data_offset};
  if (resharded_ != nullptr) {
    absl::StatusOr<NamedTensors> live = trainer_->LiveState();
    if (!live.ok()) return Annotate(live.status(), where);
    absl::StatusOr<NamedTensors> state = resharded_->State(*live);
    live = NamedTensors{};
    if (!state.ok()) return Annotate(state.status(), where);
    if (absl::Status s = trainer_->LoadState(*state); !s.ok()) return Annotate(s, where);
    Log(absl::StrCat("resharded checkpoint ", c.id(), " of layout ",
                     resharded_->from().DebugString(), " into ", layout_.DebugString()));
    resharded_.reset();  // unmap the old shards
  } else {
    if (absl::Status s = trainer_->LoadState(resume_->tensors); !s.ok()) return Annotate(s, where);
  }
  if (trainer_->steps_done() != step || (c.step() != 0 && c.step() != step) ||
      (job_.run.start_step() != 0 && job_.run.start_step() != step)) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": the shard holds step ", trainer_->steps_done(), " (metadata ", step,
        "), the checkpoint record says ", c.step(), " and the run starts at ",
        job_.run.start_step()));
  }
  data_->Seek(position);
  resume_.reset();  // free the loaded copies
  Log(absl::StrCat("resumed from checkpoint ", c.id(), " at step ", step));
  return absl::OkStatus();
}

absl::Status JobRank::SaveCheckpoint(int64_t step) {
  if (job_.run.checkpoint_dir().empty()) {
    if (!warned_no_checkpoint_dir_) {
      Log(absl::StrCat("run ", job_.run.attempt(),
                       " has no checkpoint_dir (the controller assigns it): checkpoints are off"));
      warned_no_checkpoint_dir_ = true;
    }
    return absl::OkStatus();
  }
  const std::string where = absl::StrCat(me_, ": checkpoint at step ", step);
  // At the in-flight bound (e.g. reports waiting for a controller that is down) the boundary
  // waits here, before its snapshot adds one more copy of the state to host memory.
  if (absl::Status s = writer_->WaitForRoom(); !s.ok()) return Annotate(s, me_);
  absl::StatusOr<DistTrainer::NamedTensors> state = trainer_->LiveState();
  // Asynchronous: a copy of its own (the next step changes the live tensors); synchronous: the
  // write ends before training goes on, so the live tensors are written as they are.
  if (state.ok() && async_checkpoints_) state = SnapshotToHost(*state);
  if (!state.ok()) return Annotate(state.status(), where);
  const data::DataPosition position = data_->position();
  ckpt::RankStateMeta meta;
  meta.job_id = options_.job_id;
  meta.attempt = options_.attempt;
  meta.step = step;
  meta.world_size = layout_.WorldSize();
  meta.world_rank = options_.world_rank;
  meta.layout = layout_.DebugString();
  meta.data_epoch = position.epoch;
  meta.data_offset = position.offset;
  meta.spec_json = ProtoToJson(job_.spec);
  const RankCheckpointTarget target{options_.job_id, options_.attempt, layout_.WorldSize(),
                                    options_.world_rank, job_.run.checkpoint_dir()};
  absl::Status s =
      writer_->Submit(MakeRankCheckpointTask(target, step, *std::move(state), meta.ToMetadata()));
  return s.ok() ? s : Annotate(s, me_);
}

absl::Status JobRank::CheckCheckpoints(bool drain) {
  absl::Status s = drain ? writer_->Drain() : writer_->status();
  for (const std::string& note : writer_->TakeNotes()) Log(note);
  return s.ok() ? s : Annotate(s, me_);
}

absl::StatusOr<JobRank::BoundaryAgreement> JobRank::AgreeAtStepBoundary() {
  const int64_t asked = control_.checkpoint_requested_at();
  const bool checkpoint = asked >= 0 && last_checkpoint_step_ < asked;
  auto flag = [](bool b) { return b ? 1.0f : 0.0f; };
  at::Tensor flags = at::tensor({flag(control_.stop_requested()), flag(checkpoint),
                                 flag(control_.preempt_requested())},
                                at::TensorOptions().dtype(at::kFloat))
                         .to(device_);
  if (absl::Status s = groups_->world().AllReduce(flags, comm::ReduceOp::kMax); !s.ok()) return s;
  at::Tensor host = flags.cpu();
  return BoundaryAgreement{host[0].item<float>() > 0, host[1].item<float>() > 0,
                           host[2].item<float>() > 0};
}

}  // namespace

absl::StatusOr<JobDescription> DescribeJobAttempt(const v1::GetJobResponse& job, int attempt) {
  JobDescription d;
  d.spec = job.job().spec();
  bool found = false;
  for (const v1::Run& run : job.runs()) {
    if (run.attempt() == attempt) {
      d.run = run;
      found = true;
    }
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat("job ", job.job().id(), " has no attempt ", attempt,
                                            " (current: ", job.job().current_attempt(), ")"));
  }
  if (d.run.resume_checkpoint_id() != 0) {
    for (const v1::Checkpoint& c : job.checkpoints()) {
      if (c.id() == d.run.resume_checkpoint_id()) d.resume = c;
    }
    if (!d.resume.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.job().id(), " attempt ", attempt, " resumes from checkpoint ",
          d.run.resume_checkpoint_id(), ", which the job does not list"));
    }
  }
  return d;
}

int ExitCodeOf(JobRankEnd end) {
  switch (end) {
    case JobRankEnd::kCheckpointRejected:
      return kRankExitCheckpointRejected;
    case JobRankEnd::kPreempted:
      return kRankExitPreempted;
    default:
      return 0;
  }
}

absl::StatusOr<JobRankResult> RunJobRank(const JobDescription& job, const JobRankOptions& options,
                                         comm::KvClient& kv, RankControl& control) {
  JobRank rank(job, options, kv, control);
  return rank.Run();
}

}  // namespace dhp
