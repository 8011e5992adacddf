#include "worker/model/param_init.h"
#include "worker/parallel/vision_parallel_test_util.h"

#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "worker/comm/in_memory_kv_client.h"
#include "common/layout.h"
#include "worker/comm/process_groups.h"
#include "worker/model/layers.h"
#include "worker/model/torch_status.h"

namespace dhp::testing {

const VisionConfig& TinyVision() { return FindModelPreset("tiny")->vision; }

VisionTransformer MakeTinyVision(uint64_t seed) {
  at::manual_seed(seed);
  VisionTransformer vt(TinyVision());
  InitQwenWeights(*vt, 0.05);
  return vt;
}

VisionTransformer CloneVision(const VisionTransformer& src) {
  VisionTransformer dst(src->config());
  at::NoGradGuard no_grad;
  auto from = src->named_parameters(/*recurse=*/true);
  for (auto& item : dst->named_parameters(/*recurse=*/true)) {
    item.value().copy_(from[item.key()]);
  }
  return dst;
}

std::vector<GridThw> MixedGrids() {
  return {GridThw{1, 16, 16}, GridThw{1, 8, 12}, GridThw{1, 12, 8}, GridThw{2, 8, 8}};
}

VisionBatch MakeVisionBatch(const std::vector<GridThw>& grids, uint64_t seed) {
  VisionBatch b;
  b.grids = grids;
  absl::StatusOr<VisionWindowPlan> plan = MakeVisionWindowPlan(grids, TinyVision());
  TORCH_CHECK(plan.ok(), std::string(plan.status().message()));
  b.plan = *std::move(plan);
  at::Generator gen = at::detail::createCPUGenerator(seed);  // not the default: thread-safe
  const VisionConfig& c = TinyVision();
  const int64_t dim = int64_t{c.in_channels} * c.temporal_patch_size * c.patch_size * c.patch_size;
  b.pixels = at::randn({b.plan.num_patches, dim}, gen);
  return b;
}

at::Tensor ReferenceForwardBackward(VisionTransformer& model, const VisionBatch& batch,
                                    const at::Tensor& upstream) {
  at::Tensor out = model->ForwardWithPlan(batch.pixels, batch.plan);
  (out * upstream).sum().backward();
  return out.detach();
}

std::map<std::string, at::Tensor> GradsByName(const VisionTransformer& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    const at::Tensor& g = item.value().grad();
    out[item.key()] = g.defined() ? g.detach().clone() : at::zeros_like(item.value());
  }
  return out;
}

double MaxRelDiff(const at::Tensor& a, const at::Tensor& ref) {
  const double diff = (a.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>();
  const double scale = ref.abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

absl::Status RunRanks(int size, const std::string& group, const RankBody& body) {
  comm::InMemoryKvClient kv;
  comm::GroupSpec spec;
  spec.name = group;
  for (int r = 0; r < size; ++r) spec.world_ranks.push_back(r);
  comm::ProcessGroupsOptions options;
  options.ns = absl::StrCat("test/", group, "/");
  options.arrival_timeout = std::chrono::seconds(60);
  options.collective_timeout = std::chrono::seconds(120);

  std::vector<comm::CommStats> stats(size);
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<comm::Communicator>> c =
          comm::CreateCommunicator(kv, spec, r, options, &stats[r]);
      if (!c.ok()) {
        results[r] = c.status();
        return;
      }
      try {
        results[r] = body(r, **c, stats[r]);
        // Nobody tears its backend down while a peer still talks to it.
        if (results[r].ok()) results[r] = (*c)->Barrier();
      } catch (const c10::Error& e) {
        results[r] = TorchErrorToStatus(e, absl::StrCat("rank ", r));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!results[r].ok()) return results[r];
  }
  return absl::OkStatus();
}

}  // namespace dhp::testing
