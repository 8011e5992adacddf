// LoopLedger: what the controller's loop thread was running, and when, so that the loop's lag
// (how long a probe posted onto it waited) can be split by cause: the calls it ran meanwhile, its periodic
// ticks, a /metrics scrape's visits, or none of those (the thread waited for a CPU, woke late,
// or ran asio's own work). Loop thread only; no Prometheus here (the controller exports it).
#ifndef DHP_CONTROLLER_LOOP_LEDGER_H_
#define DHP_CONTROLLER_LOOP_LEDGER_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

namespace dhp::controller {

class LoopLedger {
 public:
  using Clock = std::chrono::steady_clock;
  enum Work : int {
    kCalls,    // API calls and heartbeats (dispatched or waited for on the loop)
    kCheck,    // the once-a-second check
    kPersist,  // the persist tick: heartbeat times and step figures written
    kScrape,   // a /metrics scrape's visits to the loop
    kOther,    // the retention sweep and other posted work
    kWorkCount,
  };
  // The split's last slot: time in the window that no recorded work covered.
  static constexpr int kUnrecorded = kWorkCount;
  using Split = std::array<double, kWorkCount + 1>;  // seconds, by Work, then kUnrecorded

  // "calls", "check", "persist", "scrape", "other", "unrecorded".
  static const char* Name(int slot);

  // `capacity` spans are kept (the oldest overwritten): enough for the longest lag to split.
  explicit LoopLedger(size_t capacity = 16384);

  // `work` ran on the loop from `start` to `end`; spans are recorded in the order they end.
  void Record(Work work, Clock::time_point start, Clock::time_point end);

  // [from, to) split by what ran in it: each work's overlap with it, and the rest. Time before
  // the oldest span kept (when the ledger wrapped inside the window) counts as unrecorded.
  Split SplitWindow(Clock::time_point from, Clock::time_point to) const;

  // Seconds recorded for each work since the last call (for a counter of the loop's busy time).
  std::array<double, kWorkCount> TakeBusy();

  // Times one piece of work: records it when it goes out of scope.
  class Span {
   public:
    Span(LoopLedger& ledger, Work work) : ledger_(ledger), work_(work), start_(Clock::now()) {}
    ~Span() { ledger_.Record(work_, start_, Clock::now()); }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    LoopLedger& ledger_;
    const Work work_;
    const Clock::time_point start_;
  };

 private:
  struct Entry {
    Clock::time_point start;
    Clock::time_point end;
    Work work;
  };
  std::vector<Entry> ring_;
  size_t next_ = 0;   // where the next span goes
  size_t size_ = 0;   // spans held, up to ring_.size()
  std::array<double, kWorkCount> busy_{};
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_LOOP_LEDGER_H_
