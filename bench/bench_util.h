// Small helpers shared by benchmarks: percentiles and medians, CPU and context-switch counters
// of this process and of the machine (from getrusage and /proc), a description of the machine
// for results files, and number formatting. Stateless and thread-safe.
#ifndef DHP_BENCH_BENCH_UTIL_H_
#define DHP_BENCH_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace dhp::bench {

// The median of `v` (mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> v);
// Nearest-rank percentile (p in [0, 1]) of `sorted` nanoseconds, in milliseconds; 0 when
// empty. p = 0 gives the minimum, p = 1 the maximum.
double PercentileMs(const std::vector<int64_t>& sorted, double p);

// User + system CPU seconds of this process, all threads.
double ProcessCpuSeconds();
// Voluntary + involuntary context switches of this process, all threads.
int64_t ProcessContextSwitches();
// CPU seconds that all CPUs of the machine have spent busy (not idle, not iowait), from
// /proc/stat. The difference of two readings, less this process's and a child's CPU, is the
// load that other processes put on a shared machine.
double MachineBusySeconds();
// "some avg10" of /proc/pressure/cpu: % of the last 10 s in which some runnable task waited
// for a CPU; -1 where the kernel has no PSI.
double CpuPressureAvg10();

// date_utc, hostname, kernel, cpu_model, nproc, and loadavg_at_start and
// cpu_pressure_some_avg10_at_start (as of this call).
nlohmann::json MachineInfo();

// A relative `path` names a file of the workspace: under `bazel run` that is
// $BUILD_WORKSPACE_DIRECTORY, otherwise the current directory.
std::string InWorkspace(const std::string& path);

// The whole file; empty if unreadable.
std::string ReadFile(const std::string& path);
// `s` without trailing whitespace.
std::string Trim(std::string s);
// `v` with `digits` digits after the point.
std::string Fixed(double v, int digits);
// A gRPC channel argument given on a command line, "[LABEL:]NAME=INT" (e.g.
// new:grpc.http2.bdp_probe=0; the label names the case it is for, empty: every case).
struct ChannelArg {
  std::string label;
  std::string name;
  int value = 0;
};
// `s` parsed, or an error naming it: the shape is wrong, NAME or INT is empty, or INT is not
// an int.
absl::StatusOr<ChannelArg> ParseChannelArg(const std::string& s);

// Whether every command-line argument is well-formed UTF-8; if one is not, says which on stderr
// (its bad bytes as \xFF) and returns false. Results files are JSON and Markdown, UTF-8 only,
// and echo the flags: a bench calls this before parsing them, and exits with 2.
bool ArgsAreUtf8(int argc, const char* const* argv);

}  // namespace dhp::bench

#endif  // DHP_BENCH_BENCH_UTIL_H_
