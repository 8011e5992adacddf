// The rank layout of a dhp job: which world rank hosts which vision and text role, and which
// process groups exist. Pure C++ (no LibTorch), so that the mapping is tested in milliseconds
// and shared by the launcher, the rank and the benchmarks. Stateless and thread-safe.
//
// Terms. Sv = vision degree (ranks per vision replica: Ulysses SP, or vision TP), Tt = text
// degree (ranks per text replica: Megatron TP), dp = number of data-parallel replicas (the same
// for both stages). A *replica* d in [0, dp) of a stage is Sv (or Tt) ranks that together hold
// one copy of that stage's model; its rank i in [0, Sv) is the *inner rank*.
//
// World rank mapping.
//   collocated (vision rank i and text rank i of replica d share one process):
//     W = max(Sv, Tt); world size = W * dp; replica d owns world ranks [d*W, (d+1)*W);
//     vision (d, i) -> d*W + i;   text (d, j) -> d*W + j.
//     When Sv != Tt the ranks d*W + min(Sv,Tt) .. d*W + W-1 host one stage only.
//   separate (disjoint processes, vision ranks first):
//     world size = (Sv + Tt) * dp;
//     vision (d, i) -> d*Sv + i;   text (d, j) -> Sv*dp + d*Tt + j.
// Group ranks: in the stage groups "vision" and "text" the rank is d*Sv + i (d*Tt + j): replica-
// major. In every group the members are listed in group-rank order (member k has group rank k).
//
// Groups (names are what CommStats and error messages show), in the global creation order that
// every rank follows (ranks skip the groups they are not in; a total order cannot deadlock):
//   "world"                 all world ranks
//   "vision", "text"        all ranks of a stage (ZeRO-1 shards over "vision")
//   "vision.sp<d>"          the Sv ranks of vision replica d ("vision.tp<d>" with vision TP)
//   "text.tp<d>"            the Tt ranks of text replica d
//   "vision.dp<i>"          inner rank i of every vision replica (gradient reduction over dp)
//   "text.dp<j>"            inner rank j of every text replica
#ifndef DHP_COMMON_LAYOUT_H_
#define DHP_COMMON_LAYOUT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace dhp::comm {

enum class Placement { kCollocated, kSeparate };

// Only changes the name of the vision inner group ("vision.sp<d>" or "vision.tp<d>").
enum class VisionParallelism { kSequence, kTensor };

struct Layout {
  int vision_degree = 1;  // Sv
  int text_degree = 1;    // Tt
  int dp = 1;             // data-parallel replicas
  Placement placement = Placement::kCollocated;
  VisionParallelism vision_parallelism = VisionParallelism::kSequence;

  // InvalidArgument naming the field when a degree or dp is below 1.
  absl::Status Validate() const;

  int WorldSize() const;
  int VisionSize() const { return vision_degree * dp; }
  int TextSize() const { return text_degree * dp; }
  // True when vision rank i and text rank i share a process with equal degrees: the hand-off is
  // then a tensor passed in memory (no bytes on the wire).
  bool HandOffInMemory() const {
    return placement == Placement::kCollocated && vision_degree == text_degree;
  }
  // "vision 2 x text 2 x dp 2, collocated" for logs and errors.
  std::string DebugString() const;
};

// OK when a checkpoint written under `from` can resume under `to` (the ranks reshard it,
// worker/rank/reshard.h): Ulysses SP degree, text TP degree, dp and placement may change; the
// vision TP baseline's degree and the vision strategy may not (its ZeRO-1 state holds flattened
// TP shards). FAILED_PRECONDITION naming both layouts otherwise.
absl::Status CheckReshardable(const Layout& from, const Layout& to);

// A rank's place in one stage.
struct StageCoord {
  int replica = 0;     // d in [0, dp)
  int inner_rank = 0;  // i in [0, degree)
  int group_rank = 0;  // rank in the stage group: replica * degree + inner_rank
  bool operator==(const StageCoord& o) const {
    return replica == o.replica && inner_rank == o.inner_rank && group_rank == o.group_rank;
  }
};

// World rank of vision (replica, inner_rank) / text (replica, inner_rank). Arguments must be in
// range (checked with a crash: a caller bug).
int VisionWorldRank(const Layout& layout, int replica, int inner_rank);
int TextWorldRank(const Layout& layout, int replica, int inner_rank);

// The vision / text role hosted by `world_rank`, or nullopt if it hosts none.
std::optional<StageCoord> VisionCoord(const Layout& layout, int world_rank);
std::optional<StageCoord> TextCoord(const Layout& layout, int world_rank);

// One process group: its name and its members' world ranks in group-rank order.
struct GroupSpec {
  std::string name;
  std::vector<int> world_ranks;
  // Group rank of `world_rank`, or -1 if it is not a member.
  int GroupRank(int world_rank) const;
};

// Every group of the layout in the global creation order (see the header comment). Groups of
// size 1 are listed too (they need no communication).
std::vector<GroupSpec> AllGroups(const Layout& layout);

// Name of the vision inner group of replica d: "vision.sp<d>" or "vision.tp<d>".
std::string VisionInnerGroupName(const Layout& layout, int replica);
std::string TextInnerGroupName(int replica);    // "text.tp<d>"
std::string VisionDpGroupName(int inner_rank);  // "vision.dp<i>"
std::string TextDpGroupName(int inner_rank);    // "text.dp<j>"

}  // namespace dhp::comm

#endif  // DHP_COMMON_LAYOUT_H_
