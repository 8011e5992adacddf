// ProcessGroups: the c10d process groups of one rank for a dhp layout (see layout.h for the
// groups and the rank mapping), bootstrapped through a KvClient (the controller's rendezvous KV
// in production), each wrapped in a counting Communicator.
//
// Creation, for each group in the layout's global order that this rank belongs to:
//   1. arrival barrier on the KV (arrival_barrier.h): a member that does not arrive within
//      `arrival_timeout` fails every waiting member with DEADLINE_EXCEEDED naming the group and
//      the missing ranks, e.g. "group text.tp0 (size 2): rank 1 (world rank 3) did not arrive
//      within 5000 ms";
//   2. a ControllerStore with prefix "<ns><group>/store/" and ProcessGroupGloo (CPU, a TCP device
//      on `gloo_hostname`) or ProcessGroupNCCL (only when LibTorch has CUDA and the build defines
//      USE_C10D_NCCL; the rank must have selected its CUDA device first).
// Groups of size 1 get a LocalCommunicator (no backend). Groups with identical members (e.g.
// "world", "vision" and "vision.sp0" for vision 2 x text 2 collocated) share one backend, created
// once under the first name ("world (also vision, vision.sp0)" in errors), and each still counts
// under its own name.
//
// Thread-safety: Create is thread-safe (in-process tests run one Create per rank thread on one
// KV). A ProcessGroups object is used by its rank's thread(s): the communicators are not
// thread-safe, stats() is. The KvClient is borrowed and must outlive the object.
#ifndef DHP_WORKER_COMM_PROCESS_GROUPS_H_
#define DHP_WORKER_COMM_PROCESS_GROUPS_H_

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/comm_stats.h"
#include "worker/comm/communicator.h"
#include "worker/comm/kv_client.h"
#include "common/layout.h"

namespace dhp::comm {

enum class CommBackend { kGloo, kNccl };

struct ProcessGroupsOptions {
  CommBackend backend = CommBackend::kGloo;
  // Prefix of every KV key (e.g. "pg/"); lets one KV namespace hold several generations of
  // groups (tests, re-creation after a failure) without stale keys.
  std::string ns;
  std::chrono::milliseconds arrival_timeout = std::chrono::seconds(60);
  // Backend rendezvous on the ControllerStore (Gloo address exchange, NCCL unique id).
  std::chrono::milliseconds store_timeout = std::chrono::seconds(60);
  // Per-collective timeout of the backend.
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(5);
  std::string gloo_hostname = "127.0.0.1";  // address Gloo listens on; empty: the host's default
  int gloo_threads = 1;                     // Gloo worker threads per group
  bool share_identical_groups = true;
};

// True when this build can create ProcessGroupNCCL (USE_C10D_NCCL: CMake with a CUDA LibTorch).
bool BuiltWithNccl();

// One communicator for an arbitrary group (barrier + store + backend as above), e.g. a
// hand-off pair. `world_rank` must be a member. Errors name the group.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    KvClient& kv, const GroupSpec& group, int world_rank, const ProcessGroupsOptions& options,
    CommStats* stats);

class ProcessGroups {
 public:
  // InvalidArgument for an invalid layout or a world_rank outside [0, WorldSize()).
  static absl::StatusOr<std::unique_ptr<ProcessGroups>> Create(
      KvClient& kv, const Layout& layout, int world_rank, const ProcessGroupsOptions& options = {});

  const Layout& layout() const { return layout_; }
  int world_rank() const { return world_rank_; }
  const std::optional<StageCoord>& vision_coord() const { return vision_; }
  const std::optional<StageCoord>& text_coord() const { return text_; }

  Communicator& world() { return *Find("world"); }
  // nullptr when this rank hosts no role of that stage.
  Communicator* vision() { return Find("vision"); }
  Communicator* text() { return Find("text"); }
  Communicator* vision_inner();  // "vision.sp<d>" / "vision.tp<d>" of this rank's replica
  Communicator* text_tp();       // "text.tp<d>"
  Communicator* vision_dp();     // "vision.dp<i>"
  Communicator* text_dp();       // "text.dp<j>"
  // Any group this rank belongs to, by name; nullptr otherwise.
  Communicator* Find(std::string_view name);
  std::vector<std::string> GroupNames() const;

  CommStats& stats() { return stats_; }

 private:
  ProcessGroups(const Layout& layout, int world_rank);

  const Layout layout_;
  const int world_rank_;
  std::optional<StageCoord> vision_;
  std::optional<StageCoord> text_;
  CommStats stats_;  // declared before comms_: outlives the communicators that record into it
  std::map<std::string, std::unique_ptr<Communicator>, std::less<>> comms_;
};

}  // namespace dhp::comm

#endif  // DHP_WORKER_COMM_PROCESS_GROUPS_H_
