#include "common/proto_log.h"

#include <string>

#include "common/logging.h"
#include "google/protobuf/stubs/logging.h"

namespace dhp {
namespace {

LogRateLimit* limit = nullptr;  // set once by RouteProtobufLogs

LogLevel FromProtobuf(google::protobuf::LogLevel level) {
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO: return LogLevel::kInfo;
    case google::protobuf::LOGLEVEL_WARNING: return LogLevel::kWarning;
    default: return LogLevel::kError;  // ERROR, FATAL
  }
}

void Handle(google::protobuf::LogLevel level, const char* file, int line,
            const std::string& message) {
  const LogLevel ours = FromProtobuf(level);
  if (!LogEnabled(ours)) return;
  int64_t suppressed = 0;
  if (level != google::protobuf::LOGLEVEL_FATAL &&
      !limit->Admit(LogRateLimit::Clock::now(), &suppressed)) {
    return;
  }
  LogMessage out(ours, file, line);
  out.stream() << "protobuf: " << message;
  if (suppressed > 0) out.stream() << " (" << suppressed << " earlier protobuf lines not logged)";
}

}  // namespace

bool LogRateLimit::Admit(Clock::time_point now, int64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (admitted_ == 0 || now - window_start_ >= window_) {
    window_start_ = now;
    admitted_ = 0;
  }
  if (admitted_ >= per_window_) {
    ++refused_;
    return false;
  }
  ++admitted_;
  *suppressed = refused_;
  refused_ = 0;
  return true;
}

void RouteProtobufLogs(int per_minute) {
  static LogRateLimit* const once = new LogRateLimit(per_minute, std::chrono::minutes(1));
  limit = once;
  google::protobuf::SetLogHandler(&Handle);
}

}  // namespace dhp
