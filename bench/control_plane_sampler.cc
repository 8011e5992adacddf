#include "bench/control_plane_sampler.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include "bench/bench_util.h"

namespace dhp::bench {
namespace {

// "VmRSS:   1234 kB" and friends from /proc/<pid>/status, in bytes; "Threads:" as a count.
std::map<std::string, int64_t> StatusFields(pid_t pid) {
  std::map<std::string, int64_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    if (key != "VmRSS" && key != "VmHWM" && key != "Threads") continue;
    int64_t v = std::atoll(line.c_str() + colon + 1);
    if (key != "Threads") v *= 1024;
    out[key] = v;
  }
  return out;
}

int64_t ReadInt(const std::string& path) { return std::atoll(ReadFile(path).c_str()); }

// Threads on the whole machine: the denominator of /proc/loadavg's "running/total".
int64_t MachineThreads() {
  const std::string s = ReadFile("/proc/loadavg");
  const size_t slash = s.find('/');
  return slash == std::string::npos ? -1 : std::atoll(s.c_str() + slash + 1);
}

}  // namespace

ControllerSampler::ControllerSampler(pid_t pid, SamplerLimits limits, int period_ms)
    : pid_(pid),
      limits_(limits),
      period_ms_(period_ms),
      machine_thread_limit_(
          std::min(ReadInt("/proc/sys/kernel/pid_max"), ReadInt("/proc/sys/kernel/threads-max"))) {
  thread_ = std::thread([this] { Run(); });
}

ControllerSampler::~ControllerSampler() {
  stop_ = true;
  thread_.join();
}

void ControllerSampler::Run() {
  while (!stop_) {
    std::map<std::string, int64_t> f = StatusFields(pid_);
    const int64_t machine = MachineThreads();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (f.count("Threads")) {
        peaks_.threads_last = static_cast<int>(f["Threads"]);
        peaks_.rss_last_bytes = f["VmRSS"];
        peaks_.threads_peak = std::max(peaks_.threads_peak, peaks_.threads_last);
        peaks_.rss_peak_bytes = std::max(peaks_.rss_peak_bytes, peaks_.rss_last_bytes);
        ++peaks_.samples;
      }
      if (tripped_.empty() && peaks_.threads_last > limits_.max_controller_threads) {
        tripped_ = "the controller reached " + std::to_string(peaks_.threads_last) +
                   " threads (limit --max-controller-threads " +
                   std::to_string(limits_.max_controller_threads) + ")";
      }
      if (tripped_.empty() && machine_thread_limit_ > 0 &&
          machine > limits_.max_machine_thread_fraction * machine_thread_limit_) {
        tripped_ = "the machine reached " + std::to_string(machine) + " threads of at most " +
                   std::to_string(machine_thread_limit_);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
  }
}

SamplePeaks ControllerSampler::TakePeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  SamplePeaks out = peaks_;
  peaks_.threads_peak = peaks_.threads_last;
  peaks_.rss_peak_bytes = peaks_.rss_last_bytes;
  peaks_.samples = 0;
  return out;
}

std::string ControllerSampler::Tripped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tripped_;
}

int64_t ControllerSampler::VmHwmBytes() const {
  std::map<std::string, int64_t> f = StatusFields(pid_);
  return f.count("VmHWM") ? f["VmHWM"] : -1;
}

LoopThread FindLoopThread(pid_t pid, const std::map<pid_t, ControllerProcess::ThreadTimes>& before,
                          const std::map<pid_t, ControllerProcess::ThreadTimes>& after) {
  LoopThread best;
  for (const auto& [tid, now] : after) {
    ControllerProcess::ThreadTimes base;
    auto it = before.find(tid);
    if (it != before.end()) base = it->second;
    LoopThread t;
    t.tid = tid;
    t.name =
        Trim(ReadFile("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm"));
    t.by_name = t.name.find("loop") != std::string::npos;
    t.cpu_s = now.cpu_s - base.cpu_s;
    t.runqueue_wait_s = now.runqueue_wait_s >= 0 && base.runqueue_wait_s >= 0
                            ? now.runqueue_wait_s - base.runqueue_wait_s
                            : -1;
    const bool better = t.by_name != best.by_name ? t.by_name : t.cpu_s > best.cpu_s;
    if (best.tid == 0 || better) best = t;
  }
  return best;
}

int64_t FileBytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_size);
}

}  // namespace dhp::bench
