#include "controller/loop_ledger.h"

#include <algorithm>

namespace dhp::controller {

const char* LoopLedger::Name(int slot) {
  switch (slot) {
    case kCalls: return "calls";
    case kCheck: return "check";
    case kPersist: return "persist";
    case kScrape: return "scrape";
    case kOther: return "other";
    default: return "unrecorded";
  }
}

LoopLedger::LoopLedger(size_t capacity) : ring_(std::max<size_t>(capacity, 1)) {}

void LoopLedger::Record(Work work, Clock::time_point start, Clock::time_point end) {
  ring_[next_] = Entry{start, end, work};
  next_ = (next_ + 1) % ring_.size();
  size_ = std::min(size_ + 1, ring_.size());
  busy_[work] += std::chrono::duration<double>(end - start).count();
}

LoopLedger::Split LoopLedger::SplitWindow(Clock::time_point from, Clock::time_point to) const {
  Split split{};
  if (to <= from) return split;
  double covered = 0;
  // Newest first; spans end in order, so the walk stops at the first that ended before `from`.
  for (size_t i = 0; i < size_; ++i) {
    const Entry& e = ring_[(next_ + ring_.size() - 1 - i) % ring_.size()];
    if (e.end <= from) break;
    const auto begin = std::max(e.start, from);
    const auto end = std::min(e.end, to);
    if (end <= begin) continue;
    const double seconds = std::chrono::duration<double>(end - begin).count();
    split[e.work] += seconds;
    covered += seconds;
  }
  split[kUnrecorded] = std::max(0.0, std::chrono::duration<double>(to - from).count() - covered);
  return split;
}

std::array<double, LoopLedger::kWorkCount> LoopLedger::TakeBusy() {
  std::array<double, kWorkCount> out = busy_;
  busy_.fill(0);
  return out;
}

}  // namespace dhp::controller
