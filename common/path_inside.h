// Whether a path lies inside a directory once both are resolved: symbolic links followed (as
// far as the path exists), "." and ".." folded. For checks such as "a reported checkpoint is
// inside its run's directory" or "a spec's data path is under the agent's data roots", where a
// textual prefix test is fooled by "root/../etc" or by a link inside the root pointing out.
#ifndef DHP_COMMON_PATH_INSIDE_H_
#define DHP_COMMON_PATH_INSIDE_H_

#include <string>

namespace dhp {

// True when `path` is `dir` or below it. Relative paths resolve against the working
// directory. An error while resolving (a loop of links, a permission denied) is false.
bool PathInside(const std::string& path, const std::string& dir);

}  // namespace dhp

#endif  // DHP_COMMON_PATH_INSIDE_H_
