// ControllerSampler: samples a controller process's thread count and resident memory every
// period (from /proc/<pid>/status) on a thread of its own, keeps the peaks, and trips when the
// controller's threads or the machine's would endanger the machine (a controller that parks a
// thread per waiting RPC can exhaust pid_max and starve everything else on the host): the case
// then stops early and reports what happened.
//
// Also: which controller thread is its loop (LoopThread), and the size of its SQLite files.
//
// Thread-safety: the accessors may be called from any thread (guarded by a mutex).
#ifndef DHP_BENCH_CONTROL_PLANE_SAMPLER_H_
#define DHP_BENCH_CONTROL_PLANE_SAMPLER_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "bench/controller_process.h"

namespace dhp::bench {

struct SamplerLimits {
  int max_controller_threads = 12000;
  double max_machine_thread_fraction = 0.6;  // of min(pid_max, threads-max)
};

struct SamplePeaks {
  int threads_peak = 0, threads_last = 0;
  int64_t rss_peak_bytes = 0, rss_last_bytes = 0;
  int samples = 0;
};

class ControllerSampler {
 public:
  ControllerSampler(pid_t pid, SamplerLimits limits, int period_ms = 250);
  ~ControllerSampler();
  // The peaks since the previous call (or the start), and a fresh start.
  SamplePeaks TakePeaks();
  // Why the case must stop now; empty while all is well.
  std::string Tripped() const;
  // The process's high-water mark of resident memory (VmHWM); -1 if unreadable.
  int64_t VmHwmBytes() const;

 private:
  void Run();
  const pid_t pid_;
  const SamplerLimits limits_;
  const int period_ms_;
  const int64_t machine_thread_limit_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;  // guards peaks_ and tripped_
  SamplePeaks peaks_;
  std::string tripped_;
  std::thread thread_;
};

// The controller's loop thread between two ThreadCpuTimes readings: the thread whose name
// (/proc/<pid>/task/<tid>/comm) contains "loop" when there is one, else the thread that used the
// most CPU in between. cpu_s and runqueue_wait_s are its use in between (wait -1: unknown).
struct LoopThread {
  pid_t tid = 0;
  std::string name;
  bool by_name = false;
  double cpu_s = 0, runqueue_wait_s = -1;
};
LoopThread FindLoopThread(pid_t pid, const std::map<pid_t, ControllerProcess::ThreadTimes>& before,
                          const std::map<pid_t, ControllerProcess::ThreadTimes>& after);

// The size of the file at `path` (the database, its -wal file); -1 when it does not exist.
int64_t FileBytes(const std::string& path);

}  // namespace dhp::bench

#endif  // DHP_BENCH_CONTROL_PLANE_SAMPLER_H_
