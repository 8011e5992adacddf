#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace dhp {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("DHP_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  std::string v(env);
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warning") return LogLevel::kWarning;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

void SetMinLogLevel(LogLevel level) { MinLevel() = static_cast<int>(level); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= MinLevel().load(); }

LogMessage::LogMessage(LogLevel level, const char* file, int line) {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  const char* base = std::strrchr(file, '/');
  out_ << LevelName(level) << " " << buf << "." << (millis / 100) << ((millis / 10) % 10)
       << (millis % 10) << "Z " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  out_ << '\n';
  std::string s = out_.str();
  ssize_t ignored = ::write(2, s.data(), s.size());
  (void)ignored;
}

}  // namespace dhp
