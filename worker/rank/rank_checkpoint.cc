#include "worker/rank/rank_checkpoint.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_format.h"
#include "worker/ckpt/checkpoint_shards.h"
#include "worker/ckpt/tensor_shard.h"
#include "worker/model/torch_status.h"

namespace dhp {

absl::StatusOr<NamedTensors> SnapshotToHost(const NamedTensors& live) {
  return CatchTorch("checkpoint snapshot", [&] {
    NamedTensors out;
    out.reserve(live.size());
    const at::Tensor* last_cuda = nullptr;
    for (const auto& [name, t] : live) {
      if (!t.is_cuda()) {
        out.emplace_back(name, t.detach().clone(at::MemoryFormat::Contiguous));
        continue;
      }
      at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
      host.copy_(t.detach(), /*non_blocking=*/true);  // queued on the current stream
      out.emplace_back(name, std::move(host));
      last_cuda = &t;
    }
    if (last_cuda != nullptr) {
      // A blocking copy waits for the stream, and with it for every copy queued above (the
      // same stream, in order) before the host reads them or the next step's kernels run.
      (void)last_cuda->detach().flatten().narrow(0, 0, std::min<int64_t>(1, last_cuda->numel()))
          .to(at::kCPU);
    }
    return out;
  });
}

int64_t TensorBytes(const NamedTensors& tensors) {
  int64_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

std::string CheckpointStepDir(const std::string& checkpoint_dir, int64_t step) {
  return absl::StrFormat("%s/step-%08d", checkpoint_dir, step);
}

std::string RankShardFile(int world_rank) {
  return absl::StrFormat("rank-%05d.safetensors", world_rank);
}

CheckpointTask MakeRankCheckpointTask(const RankCheckpointTarget& target, int64_t step,
                                      NamedTensors state,
                                      std::map<std::string, std::string> metadata) {
  // shared_ptr: std::function must be copyable; the task's copies share one snapshot.
  auto tensors = std::make_shared<const NamedTensors>(std::move(state));
  auto meta = std::make_shared<const std::map<std::string, std::string>>(std::move(metadata));
  CheckpointTask task;
  task.step = step;
  task.write = [target, step, tensors,
                meta]() -> absl::StatusOr<v1::ReportCheckpointRequest> {
    const std::string dir = CheckpointStepDir(target.checkpoint_dir, step);
    absl::StatusOr<ckpt::WrittenShard> written =
        ckpt::WriteTensorShard(dir, RankShardFile(target.world_rank), *tensors, *meta);
    if (!written.ok()) return written.status();
    v1::ReportCheckpointRequest req;
    req.set_job_id(target.job_id);
    req.set_attempt(target.attempt);
    req.set_step(step);
    req.set_world_size(target.world_size);
    req.set_path(dir);
    *req.mutable_shard() = ckpt::ShardRecord(target.world_rank, written->info);
    req.set_write_seconds(written->write_seconds);
    return req;
  };
  return task;
}

}  // namespace dhp
