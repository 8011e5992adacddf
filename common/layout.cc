#include "common/layout.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace dhp::comm {
namespace {

// Broken invariant (a caller passed an out-of-range coordinate): crash loudly.
void CheckRange(bool ok, const char* what, int value, int limit) {
  DHP_CHECK(ok) << "dhp::comm layout: " << what << " " << value << " out of range [0, " << limit
                << ")";
}

}  // namespace

absl::Status Layout::Validate() const {
  if (vision_degree < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout.vision_degree: ", vision_degree, " must be at least 1"));
  }
  if (text_degree < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout.text_degree: ", text_degree, " must be at least 1"));
  }
  if (dp < 1)
    return absl::InvalidArgumentError(absl::StrCat("layout.dp: ", dp, " must be at least 1"));
  return absl::OkStatus();
}

int Layout::WorldSize() const {
  if (placement == Placement::kCollocated) return std::max(vision_degree, text_degree) * dp;
  return (vision_degree + text_degree) * dp;
}

std::string Layout::DebugString() const {
  return absl::StrCat("vision ", vision_degree,
                      vision_parallelism == VisionParallelism::kSequence ? " (sp)" : " (tp)",
                      " x text ", text_degree, " x dp ", dp, ", ",
                      placement == Placement::kCollocated ? "collocated" : "separate");
}

namespace {
bool VisionIsTensorParallel(const Layout& l) {
  return l.vision_parallelism == VisionParallelism::kTensor && l.vision_degree > 1;
}
}  // namespace

absl::Status CheckReshardable(const Layout& from, const Layout& to) {
  const bool tp = VisionIsTensorParallel(from);
  if (tp == VisionIsTensorParallel(to) && (!tp || from.vision_degree == to.vision_degree)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "a checkpoint of layout \"", from.DebugString(), "\" cannot resume under \"",
      to.DebugString(),
      "\": the vision tensor-parallel baseline keeps its ZeRO-1 state as flattened TP shards, "
      "so its vision degree and strategy must stay (Ulysses SP degree, text TP degree, data "
      "parallelism and placement may change)"));
}

int VisionWorldRank(const Layout& layout, int replica, int inner_rank) {
  CheckRange(replica >= 0 && replica < layout.dp, "vision replica", replica, layout.dp);
  CheckRange(inner_rank >= 0 && inner_rank < layout.vision_degree, "vision inner rank", inner_rank,
             layout.vision_degree);
  if (layout.placement == Placement::kCollocated) {
    return replica * std::max(layout.vision_degree, layout.text_degree) + inner_rank;
  }
  return replica * layout.vision_degree + inner_rank;
}

int TextWorldRank(const Layout& layout, int replica, int inner_rank) {
  CheckRange(replica >= 0 && replica < layout.dp, "text replica", replica, layout.dp);
  CheckRange(inner_rank >= 0 && inner_rank < layout.text_degree, "text inner rank", inner_rank,
             layout.text_degree);
  if (layout.placement == Placement::kCollocated) {
    return replica * std::max(layout.vision_degree, layout.text_degree) + inner_rank;
  }
  return layout.vision_degree * layout.dp + replica * layout.text_degree + inner_rank;
}

namespace {

// Inverse of the mappings above for one stage whose replica d starts at `base + d * stride` and
// holds `degree` consecutive ranks.
std::optional<StageCoord> CoordIn(int world_rank, int base, int stride, int degree, int dp) {
  const int offset = world_rank - base;
  if (offset < 0) return std::nullopt;
  const int replica = offset / stride;
  const int inner = offset % stride;
  if (replica >= dp || inner >= degree) return std::nullopt;
  return StageCoord{replica, inner, replica * degree + inner};
}

}  // namespace

std::optional<StageCoord> VisionCoord(const Layout& layout, int world_rank) {
  if (layout.placement == Placement::kCollocated) {
    return CoordIn(world_rank, 0, std::max(layout.vision_degree, layout.text_degree),
                   layout.vision_degree, layout.dp);
  }
  return CoordIn(world_rank, 0, layout.vision_degree, layout.vision_degree, layout.dp);
}

std::optional<StageCoord> TextCoord(const Layout& layout, int world_rank) {
  if (layout.placement == Placement::kCollocated) {
    return CoordIn(world_rank, 0, std::max(layout.vision_degree, layout.text_degree),
                   layout.text_degree, layout.dp);
  }
  return CoordIn(world_rank, layout.vision_degree * layout.dp, layout.text_degree,
                 layout.text_degree, layout.dp);
}

int GroupSpec::GroupRank(int world_rank) const {
  auto it = std::find(world_ranks.begin(), world_ranks.end(), world_rank);
  return it == world_ranks.end() ? -1 : static_cast<int>(it - world_ranks.begin());
}

std::string VisionInnerGroupName(const Layout& layout, int replica) {
  return absl::StrCat(
      layout.vision_parallelism == VisionParallelism::kSequence ? "vision.sp" : "vision.tp",
      replica);
}
std::string TextInnerGroupName(int replica) { return absl::StrCat("text.tp", replica); }
std::string VisionDpGroupName(int inner_rank) { return absl::StrCat("vision.dp", inner_rank); }
std::string TextDpGroupName(int inner_rank) { return absl::StrCat("text.dp", inner_rank); }

std::vector<GroupSpec> AllGroups(const Layout& layout) {
  const int sv = layout.vision_degree, tt = layout.text_degree, dp = layout.dp;
  std::vector<GroupSpec> groups;
  GroupSpec world{"world", {}};
  for (int r = 0; r < layout.WorldSize(); ++r) world.world_ranks.push_back(r);
  groups.push_back(std::move(world));

  GroupSpec vision{"vision", {}}, text{"text", {}};
  for (int d = 0; d < dp; ++d) {
    for (int i = 0; i < sv; ++i) vision.world_ranks.push_back(VisionWorldRank(layout, d, i));
    for (int j = 0; j < tt; ++j) text.world_ranks.push_back(TextWorldRank(layout, d, j));
  }
  groups.push_back(std::move(vision));
  groups.push_back(std::move(text));

  for (int d = 0; d < dp; ++d) {
    GroupSpec g{VisionInnerGroupName(layout, d), {}};
    for (int i = 0; i < sv; ++i) g.world_ranks.push_back(VisionWorldRank(layout, d, i));
    groups.push_back(std::move(g));
  }
  for (int d = 0; d < dp; ++d) {
    GroupSpec g{TextInnerGroupName(d), {}};
    for (int j = 0; j < tt; ++j) g.world_ranks.push_back(TextWorldRank(layout, d, j));
    groups.push_back(std::move(g));
  }
  for (int i = 0; i < sv; ++i) {
    GroupSpec g{VisionDpGroupName(i), {}};
    for (int d = 0; d < dp; ++d) g.world_ranks.push_back(VisionWorldRank(layout, d, i));
    groups.push_back(std::move(g));
  }
  for (int j = 0; j < tt; ++j) {
    GroupSpec g{TextDpGroupName(j), {}};
    for (int d = 0; d < dp; ++d) g.world_ranks.push_back(TextWorldRank(layout, d, j));
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace dhp::comm
