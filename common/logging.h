// Minimal leveled logging to stderr: `DHP_LOG(INFO) << "listening on " << port;`
//
// One line per message with a UTC timestamp, level and source location. Thread-safe: each
// message is formatted in its own buffer and written with a single write().
#ifndef DHP_COMMON_LOGGING_H_
#define DHP_COMMON_LOGGING_H_

#include <sstream>

namespace dhp {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Default kInfo; DHP_LOG_LEVEL=debug|info|warning|error.
void SetMinLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

// Turns `LogVoidify() & stream << ...` into a void expression, so DHP_LOG can be the branch of a
// conditional expression (no dangling else, safe in an unbraced `if`).
struct LogVoidify {
  void operator&(std::ostream&) {}
};

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return out_; }

 private:
  std::ostringstream out_;
};

}  // namespace dhp

#define DHP_LOG_LEVEL_DEBUG ::dhp::LogLevel::kDebug
#define DHP_LOG_LEVEL_INFO ::dhp::LogLevel::kInfo
#define DHP_LOG_LEVEL_WARNING ::dhp::LogLevel::kWarning
#define DHP_LOG_LEVEL_ERROR ::dhp::LogLevel::kError
#define DHP_LOG(level)                                  \
  !::dhp::LogEnabled(DHP_LOG_LEVEL_##level)             \
      ? (void)0                                         \
      : ::dhp::LogVoidify() &                           \
            ::dhp::LogMessage(DHP_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#endif  // DHP_COMMON_LOGGING_H_
