#include "bench/bench_util.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/utf8.h"

namespace dhp::bench {

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

int64_t ProcessContextSwitches() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_nvcsw + u.ru_nivcsw;
}

// CPU seconds all CPUs of the machine have spent busy (not idle or iowait), from /proc/stat.
double MachineBusySeconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  long long v[10] = {};
  in >> cpu;
  for (long long& x : v) in >> x;
  long long busy = 0;
  for (int i = 0; i < 10; ++i) {
    if (i != 3 && i != 4 && i < 8) busy += v[i];  // user nice system [idle iowait] irq softirq steal
  }
  return static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// "some avg10" of /proc/pressure/cpu: % of the last 10 s in which some runnable task waited
// for a CPU; -1 without PSI.
double CpuPressureAvg10() {
  std::ifstream in("/proc/pressure/cpu");
  std::string word;
  while (in >> word) {
    if (word.rfind("avg10=", 0) == 0) return std::atof(word.c_str() + 6);
  }
  return -1;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Nearest-rank percentile of sorted values, in ms.
double PercentileMs(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) * 1e-6;
}

std::string InWorkspace(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return ws != nullptr && *ws ? std::string(ws) + "/" + path : path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {

std::string FirstLineWith(const std::string& path, const std::string& prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "";
}

}  // namespace

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

nlohmann::json MachineInfo() {
  utsname u{};
  uname(&u);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return nlohmann::json{{"date_utc", date},
              {"hostname", host},
              {"kernel", std::string(u.sysname) + " " + u.release},
              {"cpu_model", FirstLineWith("/proc/cpuinfo", "model name")},
              {"nproc", static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))},
              {"loadavg_at_start", Trim(ReadFile("/proc/loadavg"))},
              {"cpu_pressure_some_avg10_at_start", CpuPressureAvg10()}};
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

absl::StatusOr<ChannelArg> ParseChannelArg(const std::string& s) {
  ChannelArg arg;
  const size_t colon = s.find(':');
  const size_t eq = s.find('=', colon == std::string::npos ? 0 : colon + 1);
  const size_t name_at = colon == std::string::npos ? 0 : colon + 1;
  if (eq == std::string::npos || eq == name_at || eq + 1 == s.size()) {
    return absl::InvalidArgumentError("expected [LABEL:]NAME=INT, got \"" + s + "\"");
  }
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s.c_str() + eq + 1, &end, 10);
  if (errno != 0 || *end != '\0' || v < INT32_MIN || v > INT32_MAX) {
    return absl::InvalidArgumentError("\"" + s.substr(eq + 1) + "\" in \"" + s +
                                      "\" is not an int");
  }
  if (colon != std::string::npos) arg.label = s.substr(0, colon);
  arg.name = s.substr(name_at, eq - name_at);
  arg.value = static_cast<int>(v);
  return arg;
}

bool ArgsAreUtf8(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    if (const std::string bad = Utf8Error(argv[i]); !bad.empty()) {
      std::cerr << EscapeInvalidUtf8(argv[0]) << ": argument " << i << ", \""
                << EscapeInvalidUtf8(argv[i]) << "\", is " << bad
                << "; the results files (JSON, Markdown) hold UTF-8 only\n";
      return false;
    }
  }
  return true;
}

}  // namespace dhp::bench
