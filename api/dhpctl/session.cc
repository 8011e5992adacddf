#include "api/dhpctl/session.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/clock.h"

namespace dhp::dhpctl {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

void OnInterrupt(int) { g_interrupted = 1; }

}  // namespace

int64_t Now() { return SystemClock().NowMicros(); }

void CatchInterrupts() {
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool SleepUnlessInterrupted(int ms) {
  for (int slept = 0; slept < ms && !g_interrupted; slept += 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(20, ms - slept)));
  }
  return !g_interrupted;
}

bool Interrupted() { return g_interrupted != 0; }

int TerminalWidth() {
  struct winsize ws = {};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

int Report(const absl::Status& s, const std::string& server) {
  if (s.code() == absl::StatusCode::kUnavailable) {
    std::cerr << "dhpctl: cannot reach the controller at " << server
              << " (is dhp-controller running? set --server or DHP_SERVER): " << s.message()
              << "\n";
    return 3;
  }
  std::string code = absl::StatusCodeToString(s.code());
  std::cerr << "dhpctl: " << code << ": " << s.message() << "\n";
  return 1;
}

int Print(const google::protobuf::Message& msg, const Globals& g, const std::string& table) {
  std::cout << (g.format() == Format::kTable ? table : Structured(msg, g.format()));
  if (g.format() == Format::kJson) std::cout << "\n";
  return 0;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path == "-" ? "/dev/stdin" : path);
  if (!in) return false;
  std::stringstream buf;
  buf << in.rdbuf();
  *out = buf.str();
  return true;
}

}  // namespace dhp::dhpctl
