// PhaseTimer: wall time of the consecutive phases of one piece of work on the controller's loop
// (the once-a-second check), for dhp_controller_tick_seconds and the slow-tick warning.
// Not thread-safe; one per piece of work.
#ifndef DHP_CONTROLLER_PHASE_TIMER_H_
#define DHP_CONTROLLER_PHASE_TIMER_H_

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace dhp::controller {

class PhaseTimer {
 public:
  using Laps = std::vector<std::pair<std::string, double>>;  // phase, seconds

  PhaseTimer() : mark_(std::chrono::steady_clock::now()) {}

  // Ends the phase that began at the previous Lap (or at construction).
  void Lap(std::string phase) { Add(std::move(phase), std::chrono::steady_clock::now()); }

  const Laps& laps() const { return laps_; }
  double total() const {
    double sum = 0;
    for (const auto& lap : laps_) sum += lap.second;
    return sum;
  }
  // "123.4 ms (nodes 3.1 ms, stalls 0.2 ms, ...)", phases in order.
  std::string Describe() const {
    std::string out = Ms(total()) + " (";
    for (size_t i = 0; i < laps_.size(); ++i) {
      out += (i > 0 ? ", " : "") + laps_[i].first + " " + Ms(laps_[i].second);
    }
    return out + ")";
  }

  // For tests: ends a phase at `now`.
  void Add(std::string phase, std::chrono::steady_clock::time_point now) {
    laps_.emplace_back(std::move(phase), std::chrono::duration<double>(now - mark_).count());
    mark_ = now;
  }

 private:
  static std::string Ms(double seconds) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1000);
    return buf;
  }

  std::chrono::steady_clock::time_point mark_;
  Laps laps_;
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_PHASE_TIMER_H_
