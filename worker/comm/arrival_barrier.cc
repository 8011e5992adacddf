#include "worker/comm/arrival_barrier.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp::comm {

std::string ArrivalKey(const std::string& ns, const std::string& group, int group_rank) {
  return absl::StrCat(ns, group, "/arrived/", group_rank);
}

std::string ConnectedKey(const std::string& ns, const std::string& group, int group_rank) {
  return absl::StrCat(ns, group, "/connected/", group_rank);
}

namespace {

struct Stage {
  std::string (*key)(const std::string& ns, const std::string& group, int group_rank);
  const char* announce;  // what a member does when it sets its key
  const char* missing;   // what a member that never set its key did not do
};
constexpr Stage kArrival{&ArrivalKey, "announcing", "did not arrive"};
constexpr Stage kConnected{&ConnectedKey, "reporting connected", "did not finish connecting"};

absl::Status MemberBarrier(const Stage& stage, KvClient& kv, const std::string& ns,
                           const GroupSpec& group, int world_rank,
                           std::chrono::milliseconds timeout, const std::string& display_name) {
  const std::string name = display_name.empty() ? group.name : display_name;
  const int size = static_cast<int>(group.world_ranks.size());
  const std::string what = absl::StrCat("group ", name, " (size ", size, ")");
  const int my_rank = group.GroupRank(world_rank);
  if (my_rank < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": world rank ", world_rank, " is not a member"));
  }
  if (absl::Status s = kv.Set(stage.key(ns, group.name, my_rank), std::to_string(world_rank));
      !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat(what, ": ", stage.announce, " rank ", my_rank, ": ", s.message()));
  }
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(stage.key(ns, group.name, r));
  absl::Status s = kv.Wait(keys, timeout);
  if (s.ok()) return s;
  if (!absl::IsDeadlineExceeded(s)) {
    return absl::Status(s.code(), absl::StrCat(what, ": waiting for members: ", s.message()));
  }
  // Name the members still missing (one non-blocking check per key).
  std::vector<std::string> missing;
  for (int r = 0; r < size; ++r) {
    absl::StatusOr<bool> here = kv.Check({keys[r]});
    if (here.ok() && *here) continue;
    missing.push_back(absl::StrCat(r, " (world rank ", group.world_ranks[r], ")"));
  }
  if (missing.empty()) return absl::OkStatus();  // the last one arrived just now
  return absl::DeadlineExceededError(absl::StrCat(
      what, ": ", missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "), " ",
      stage.missing, " within ", timeout.count(), " ms"));
}

}  // namespace

absl::Status ArrivalBarrier(KvClient& kv, const std::string& ns, const GroupSpec& group,
                            int world_rank, std::chrono::milliseconds timeout,
                            const std::string& display_name) {
  return MemberBarrier(kArrival, kv, ns, group, world_rank, timeout, display_name);
}

absl::Status ConnectedBarrier(KvClient& kv, const std::string& ns, const GroupSpec& group,
                              int world_rank, std::chrono::milliseconds timeout,
                              const std::string& display_name) {
  return MemberBarrier(kConnected, kv, ns, group, world_rank, timeout, display_name);
}

}  // namespace dhp::comm
