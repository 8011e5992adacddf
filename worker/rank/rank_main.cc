// dhp-rank: one rank process of a distributed job. Joins the job's process groups through the
// controller's rendezvous KV (GrpcKvClient, keys scoped by job and attempt), then runs N steps of
// the distributed step (dist_step.h) on synthetic data (tiny preset by default, fp32 CPU) and
// prints one line per step and the bytes moved per group at the end.
//
//   dhp-rank --controller 127.0.0.1:7070 --job J --attempt 1 --world-rank 0
//            --layout 2,2,1 [--separate] [--vision-tp] --steps 5
// Every rank of the layout (Layout::WorldSize()) must be started with the same flags but its own
// --world-rank (tools/launch_ranks.sh does that). Exit code 0 on success, 1 on any error (the
// message names the group and rank that failed).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "api/client.h"
#include "common/model_presets.h"
#include "worker/comm/grpc_kv_client.h"
#include "common/layout.h"
#include "worker/comm/process_groups.h"
#include "worker/model/layers.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/torch_status.h"
#include "worker/model/vision_window.h"
#include "worker/rank/dist_step.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp {
namespace {

int Run(int argc, char** argv) {
  std::string controller = "127.0.0.1:7070", token, job, layout_str = "1,1,1", preset_name = "tiny";
  int attempt = 1, world_rank = 0, steps = 3, timeout_s = 120;
  bool separate = false, vision_tp = false;
  double lr = 1e-3;
  CLI::App app{"dhp-rank: one rank of a distributed dhp job (synthetic data)"};
  app.add_option("--controller", controller, "Controller gRPC address host:port");
  app.add_option("--token", token, "Bearer token for the controller (if auth is on)");
  app.add_option("--job", job, "Job id (rendezvous KV scope)")->required();
  app.add_option("--attempt", attempt, "Run attempt of the job (KV scope)")
      ->check(CLI::PositiveNumber);
  app.add_option("--world-rank", world_rank, "This process's world rank")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--layout", layout_str, "vision degree,text degree,dp (e.g. 2,2,1)");
  app.add_flag("--separate", separate, "Separate placement (default: collocated)");
  app.add_flag("--vision-tp", vision_tp, "Vision tensor parallelism instead of Ulysses SP");
  app.add_option("--preset", preset_name, "Model preset (common/model_presets.h)");
  app.add_option("--steps", steps, "Training steps")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "Peak learning rate (cosine schedule over --steps)");
  app.add_option("--timeout", timeout_s, "Rendezvous and collective timeout, seconds")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> parts = absl::StrSplit(layout_str, ',');
  comm::Layout layout;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &layout.vision_degree) ||
      !absl::SimpleAtoi(parts[1], &layout.text_degree) || !absl::SimpleAtoi(parts[2], &layout.dp)) {
    std::fprintf(stderr, "--layout %s: expected three integers \"Sv,Tt,dp\", e.g. 2,2,1\n",
                 layout_str.c_str());
    return 1;
  }
  layout.placement = separate ? comm::Placement::kSeparate : comm::Placement::kCollocated;
  if (vision_tp) layout.vision_parallelism = comm::VisionParallelism::kTensor;
  if (absl::Status s = layout.Validate(); !s.ok()) {
    std::fprintf(stderr, "--layout: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (world_rank >= layout.WorldSize()) {
    std::fprintf(stderr, "--world-rank %d: layout %s has %d ranks (0..%d)\n", world_rank,
                 layout.DebugString().c_str(), layout.WorldSize(), layout.WorldSize() - 1);
    return 1;
  }
  const ModelPreset* preset = FindModelPreset(preset_name);
  if (preset == nullptr) {
    std::fprintf(stderr, "--preset %s: unknown preset\n", preset_name.c_str());
    return 1;
  }
  at::set_num_threads(1);

  api::DhpClient client(controller, 30000, token);
  comm::GrpcKvClient kv(client, job, attempt);
  comm::ProcessGroupsOptions po;
  po.arrival_timeout = std::chrono::seconds(timeout_s);
  po.store_timeout = std::chrono::seconds(timeout_s);
  po.collective_timeout = std::chrono::seconds(timeout_s);
  absl::StatusOr<std::unique_ptr<comm::ProcessGroups>> groups =
      comm::ProcessGroups::Create(kv, layout, world_rank, po);
  if (!groups.ok()) {
    std::fprintf(stderr, "rank %d: process groups: %s\n", world_rank,
                 groups.status().ToString().c_str());
    return 1;
  }
  comm::GroupSpec all{kHandoffGroup, std::vector<int>(layout.WorldSize())};
  std::iota(all.world_ranks.begin(), all.world_ranks.end(), 0);
  absl::StatusOr<std::unique_ptr<comm::Communicator>> handoff =
      comm::CreateCommunicator(kv, all, world_rank, po, &(*groups)->stats());
  if (!handoff.ok()) {
    std::fprintf(stderr, "rank %d: hand-off group: %s\n", world_rank,
                 handoff.status().ToString().c_str());
    return 1;
  }

  DistTrainerOptions options;
  options.optimizer.weight_decay = 0.1;
  options.schedule.kind = LrScheduleKind::kCosine;
  options.schedule.peak = lr;
  options.schedule.floor = lr / 10;
  options.schedule.max_steps = steps;
  Qwen2_5_VL model{nullptr};
  absl::Status built = CatchTorch("model", [&] {
    at::manual_seed(5);  // the same initial weights on every rank
    model = Qwen2_5_VL(*preset);
    InitQwenWeights(*model, 0.02);
  });
  if (!built.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", world_rank, built.ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<DistTrainer>> trainer =
      DistTrainer::Create(*preset, model, **groups, handoff->get(), options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", world_rank, trainer.status().ToString().c_str());
    return 1;
  }
  const int64_t merge = preset->vision.spatial_merge_size;
  for (int s = 0; s < steps; ++s) {
    std::vector<PackedBatch> batches;
    for (int d = 0; d < layout.dp; ++d) {
      const int64_t seed = 100 * s + d;
      batches.push_back(MakeSyntheticBatch(
          *preset, {{1, 2 * merge, 3 * merge}, {1, (2 + seed % 3) * merge, 2 * merge}}, seed));
    }
    absl::StatusOr<DistStepResult> r = (*trainer)->Step(batches);
    if (!r.ok()) {
      std::fprintf(stderr, "rank %d step %d: %s\n", world_rank, s, r.status().ToString().c_str());
      return 1;
    }
    // The loss is known on text ranks; vision-only ranks print "-".
    const std::string loss = (*groups)->text_coord().has_value()
                                 ? std::to_string(r->loss)
                                 : std::string("-");
    std::printf("rank %d step %d loss %s grad_norm %.6f lr %.3g\n", world_rank, s, loss.c_str(),
                r->grad_norm, r->lr);
    std::fflush(stdout);
  }
  for (const auto& [key, c] : (*groups)->stats().Snapshot()) {
    std::printf("rank %d comm %s %s calls %lld sent %lld received %lld\n", world_rank,
                key.first.c_str(), key.second.c_str(), static_cast<long long>(c.calls),
                static_cast<long long>(c.bytes_sent), static_cast<long long>(c.bytes_received));
  }
  return 0;
}

}  // namespace
}  // namespace dhp

int main(int argc, char** argv) { return dhp::Run(argc, argv); }
