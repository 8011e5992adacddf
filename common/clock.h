// Clock: the one source of wall time for code that must be testable with a fake.
//
// SystemClock reads the real clock; FakeClock only moves when a test advances it. Both are
// thread-safe.
#ifndef DHP_COMMON_CLOCK_H_
#define DHP_COMMON_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace dhp {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds since the Unix epoch.
  virtual int64_t NowMicros() const = 0;
};

class SystemClock : public Clock {
 public:
  int64_t NowMicros() const override;
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_micros = 1'700'000'000'000'000) : now_(start_micros) {}
  int64_t NowMicros() const override { return now_.load(); }
  void AdvanceMicros(int64_t delta) { now_ += delta; }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace dhp

#endif  // DHP_COMMON_CLOCK_H_
