#include "worker/comm/process_groups.h"

// ProcessGroupGloo.hpp is guarded by USE_C10D_GLOO, which the build defines for this target.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/comm/arrival_barrier.h"
#include "worker/comm/controller_store.h"
#include "worker/comm/local_communicator.h"
#include "worker/comm/process_group_communicator.h"
#include "worker/model/torch_status.h"

namespace dhp::comm {
namespace {

using GlooDevice = std::shared_ptr<::gloo::transport::Device>;
using Backend = c10::intrusive_ptr<compat::C10dBackend>;

absl::StatusOr<GlooDevice> MakeGlooDevice(const ProcessGroupsOptions& options) {
  return CatchTorch("creating the Gloo TCP device", [&] {
    return options.gloo_hostname.empty()
               ? c10d::ProcessGroupGloo::createDefaultDevice()
               : c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_hostname);
  });
}

// The backend of `group` (size > 1) under the display name `display`, without the barriers.
absl::StatusOr<Backend> ConstructBackend(KvClient& kv, const GroupSpec& group,
                                         const std::string& display, int world_rank,
                                         const ProcessGroupsOptions& options,
                                         const GlooDevice& device) {
  const int rank = group.GroupRank(world_rank);
  const int size = static_cast<int>(group.world_ranks.size());
  auto store = c10::make_intrusive<ControllerStore>(
      kv, absl::StrCat(options.ns, group.name, "/store/"), options.store_timeout);
  const std::string context =
      absl::StrCat("creating group ", display, " (size ", size, ") as rank ", rank);
  try {
    if (options.backend == CommBackend::kNccl) {
#ifdef USE_C10D_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = options.collective_timeout;
      return Backend(c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts));
#else
      return absl::UnimplementedError(absl::StrCat(
          context,
          ": this build has no NCCL (LibTorch without CUDA, or USE_C10D_NCCL undefined); "
          "use the gloo backend"));
#endif
    }
    auto opts = c10d::ProcessGroupGloo::Options::create(options.collective_timeout);
    opts->devices.push_back(device);
    opts->threads = std::max(1, options.gloo_threads);
    return Backend(c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts));
  } catch (const c10::Error& e) {
    return TorchErrorToStatus(e, context);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(context, ": ", e.what()));
  }
}

// Arrival barrier, the backend, then the connected barrier (arrival_barrier.h says why).
absl::StatusOr<Backend> MakeBackend(KvClient& kv, const GroupSpec& group,
                                    const std::string& display, int world_rank,
                                    const ProcessGroupsOptions& options, const GlooDevice& device) {
  if (absl::Status s =
          ArrivalBarrier(kv, options.ns, group, world_rank, options.arrival_timeout, display);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<Backend> backend =
      ConstructBackend(kv, group, display, world_rank, options, device);
  if (!backend.ok()) return backend;
  if (absl::Status s =
          ConnectedBarrier(kv, options.ns, group, world_rank, options.arrival_timeout, display);
      !s.ok()) {
    return s;
  }
  return backend;
}

}  // namespace

bool BuiltWithNccl() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    KvClient& kv, const GroupSpec& group, int world_rank, const ProcessGroupsOptions& options,
    CommStats* stats) {
  if (group.GroupRank(world_rank) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group.name, ": world rank ", world_rank, " is not a member"));
  }
  if (group.world_ranks.size() == 1) {
    return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>(group.name, stats));
  }
  GlooDevice device;
  if (options.backend == CommBackend::kGloo) {
    absl::StatusOr<GlooDevice> d = MakeGlooDevice(options);
    if (!d.ok()) return d.status();
    device = *d;
  }
  absl::StatusOr<Backend> backend = MakeBackend(kv, group, group.name, world_rank, options, device);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Communicator>(
      std::make_unique<ProcessGroupCommunicator>(group.name, *backend, stats));
}

ProcessGroups::ProcessGroups(const Layout& layout, int world_rank)
    : layout_(layout),
      world_rank_(world_rank),
      vision_(VisionCoord(layout, world_rank)),
      text_(TextCoord(layout, world_rank)) {}

absl::StatusOr<std::unique_ptr<ProcessGroups>> ProcessGroups::Create(
    KvClient& kv, const Layout& layout, int world_rank, const ProcessGroupsOptions& options) {
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  if (world_rank < 0 || world_rank >= layout.WorldSize()) {
    return absl::InvalidArgumentError(absl::StrCat("world_rank: ", world_rank, " out of range for ",
                                                   layout.DebugString(), " (world size ",
                                                   layout.WorldSize(), ")"));
  }
  std::unique_ptr<ProcessGroups> pgs(new ProcessGroups(layout, world_rank));

  // Distinct member lists in order of first appearance, each with the names that share it.
  std::vector<std::pair<GroupSpec, std::vector<std::string>>> distinct;
  for (const GroupSpec& g : AllGroups(layout)) {
    auto it = std::find_if(distinct.begin(), distinct.end(), [&](const auto& d) {
      return options.share_identical_groups && d.first.world_ranks == g.world_ranks;
    });
    if (it == distinct.end()) {
      distinct.push_back({g, {g.name}});
    } else {
      it->second.push_back(g.name);
    }
  }

  GlooDevice device;
  for (const auto& [group, names] : distinct) {
    if (group.GroupRank(world_rank) < 0) continue;
    if (group.world_ranks.size() == 1) {
      for (const std::string& n : names) {
        pgs->comms_[n] = std::make_unique<LocalCommunicator>(n, &pgs->stats_);
      }
      continue;
    }
    if (options.backend == CommBackend::kGloo && !device) {
      absl::StatusOr<GlooDevice> d = MakeGlooDevice(options);
      if (!d.ok()) return d.status();
      device = *d;
    }
    std::string display = group.name;
    if (names.size() > 1) {
      display = absl::StrCat(group.name, " (also ",
                             absl::StrJoin(names.begin() + 1, names.end(), ", "), ")");
    }
    absl::StatusOr<Backend> backend = MakeBackend(kv, group, display, world_rank, options, device);
    if (!backend.ok()) return backend.status();
    for (const std::string& n : names) {
      pgs->comms_[n] = std::make_unique<ProcessGroupCommunicator>(n, *backend, &pgs->stats_);
    }
  }
  return pgs;
}

Communicator* ProcessGroups::Find(std::string_view name) {
  auto it = comms_.find(name);
  return it == comms_.end() ? nullptr : it->second.get();
}

Communicator* ProcessGroups::vision_inner() {
  return vision_ ? Find(VisionInnerGroupName(layout_, vision_->replica)) : nullptr;
}
Communicator* ProcessGroups::text_tp() {
  return text_ ? Find(TextInnerGroupName(text_->replica)) : nullptr;
}
Communicator* ProcessGroups::vision_dp() {
  return vision_ ? Find(VisionDpGroupName(vision_->inner_rank)) : nullptr;
}
Communicator* ProcessGroups::text_dp() {
  return text_ ? Find(TextDpGroupName(text_->inner_rank)) : nullptr;
}

std::vector<std::string> ProcessGroups::GroupNames() const {
  std::vector<std::string> names;
  for (const auto& [n, c] : comms_) names.push_back(n);
  return names;
}

}  // namespace dhp::comm
