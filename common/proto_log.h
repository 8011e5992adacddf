// Protobuf's own log lines through DHP_LOG, rate-limited. Protobuf logs one ERROR line each time
// it parses a string field that is not valid UTF-8, so any client that sends such bytes could
// fill a server's log; dhp already answers those requests with INVALID_ARGUMENT naming the
// field (api/grpc_decode.h), so the lines add nothing but volume.
//
//   int main(...) { dhp::RouteProtobufLogs(); ... }
#ifndef DHP_COMMON_PROTO_LOG_H_
#define DHP_COMMON_PROTO_LOG_H_

#include <chrono>
#include <cstdint>
#include <mutex>

namespace dhp {

// At most `per_window` lines in each `window`; the rest are counted, and the count is told with
// the next line let through. Thread-safe.
class LogRateLimit {
 public:
  using Clock = std::chrono::steady_clock;
  LogRateLimit(int per_window, Clock::duration window) : per_window_(per_window), window_(window) {}

  // Whether a line at `now` may be written; when it may, *suppressed is the number refused since
  // the last one written.
  bool Admit(Clock::time_point now, int64_t* suppressed);

 private:
  const int per_window_;
  const Clock::duration window_;
  std::mutex mu_;  // guards the rest
  Clock::time_point window_start_{};
  int admitted_ = 0;     // in this window
  int64_t refused_ = 0;  // since the last line admitted
};

// Installs the handler (protobuf's SetLogHandler: call it early in main, before other threads
// use protobuf). Lines are prefixed "protobuf: " and keep protobuf's level and source location;
// FATAL lines are always written. At most `per_minute` lines a minute (the first call's).
void RouteProtobufLogs(int per_minute = 10);

}  // namespace dhp

#endif  // DHP_COMMON_PROTO_LOG_H_
