// Which files a job's spec may make a rank read: its data paths (model.weights_path, and each
// dataset's annotation_path and image_root) must resolve, symbolic links followed, inside the
// node's data roots: the agent's --data-root (against which relative paths resolve) and any
// --allow-data-root, unless the agent says --allow-any-data-path. Otherwise anyone who may
// submit a job could make ranks read any file the worker can (and ship parts of it back in
// logs or errors).
//
// Image paths inside annotation files are not checked here (they are data, read per sample).
#ifndef DHP_WORKER_RANK_DATA_ROOTS_H_
#define DHP_WORKER_RANK_DATA_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "dhp/v1/job_spec.pb.h"

namespace dhp {

struct DataRootPolicy {
  std::string data_root = ".";           // relative spec paths resolve under it
  std::vector<std::string> extra_roots;  // more directories spec paths may name
  bool allow_any = false;                // no check at all
};

// OK, or INVALID_ARGUMENT naming the first field whose path lies outside every root, where
// it resolves to, the roots, and the agent flags that would allow it.
absl::Status CheckSpecDataPaths(const v1::JobSpec& spec, const DataRootPolicy& policy);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_DATA_ROOTS_H_
