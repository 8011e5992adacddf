// control_plane_bench's report: the Markdown tables (one per controller binary, a row per case,
// and a side-by-side table when there are two or more binaries) made from the run's JSON, and
// the files bench/results/control_plane.{md,json}. Stateless.
#ifndef DHP_BENCH_CONTROL_PLANE_REPORT_H_
#define DHP_BENCH_CONTROL_PLANE_REPORT_H_

#include <string>

#include "nlohmann/json.hpp"

namespace dhp::bench {

// `run` holds "machine" (MachineInfo), "command" (how to rerun), "options", "generator" and
// "cases" (RunNodeCase / RunQueuedCase results, any order).
std::string ControlPlaneMarkdown(const nlohmann::json& run);

// Writes <out_dir>/control_plane.md and .json; false (with a message on stderr) on failure.
bool WriteControlPlaneResults(const std::string& out_dir, const nlohmann::json& run);

}  // namespace dhp::bench

#endif  // DHP_BENCH_CONTROL_PLANE_REPORT_H_
