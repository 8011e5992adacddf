#include "worker/rank/data_roots.h"

#include <limits.h>
#include <stdlib.h>

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/path_inside.h"
#include "worker/rank/data_pipeline.h"

namespace dhp {
namespace {

// `path` with links resolved as far as it exists, for messages.
std::string Shown(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

}  // namespace

absl::Status CheckSpecDataPaths(const v1::JobSpec& spec, const DataRootPolicy& policy) {
  if (policy.allow_any) return absl::OkStatus();
  std::vector<std::string> roots = {policy.data_root.empty() ? "." : policy.data_root};
  roots.insert(roots.end(), policy.extra_roots.begin(), policy.extra_roots.end());

  std::vector<std::pair<std::string, std::string>> fields;  // (field, path)
  fields.emplace_back("model.weights_path", spec.model().weights_path());
  // Sorted by name, so that the first error is the same on every rank and every run.
  const std::map<std::string, v1::DatasetSource> registry(spec.data().registry().begin(),
                                                          spec.data().registry().end());
  for (const auto& [name, source] : registry) {
    fields.emplace_back("data.registry." + name + ".annotation_path", source.annotation_path());
    fields.emplace_back("data.registry." + name + ".image_root", source.image_root());
  }
  for (const auto& [field, path] : fields) {
    if (path.empty()) continue;
    const std::string resolved = ResolveDataPath(policy.data_root, path);
    bool inside = false;
    for (const std::string& root : roots) inside = inside || PathInside(resolved, root);
    if (inside) continue;
    std::vector<std::string> shown;
    for (const std::string& root : roots) shown.push_back(Shown(root));
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": \"", path, "\" resolves to ", Shown(resolved),
        ", outside this node's data roots (", absl::StrJoin(shown, ", "),
        "); dhp-worker --allow-data-root DIR adds a root, --allow-any-data-path lifts the "
        "check"));
  }
  return absl::OkStatus();
}

}  // namespace dhp
