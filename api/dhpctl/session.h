// What dhpctl's commands share: the global flags, the answer to a failed call (a line a
// person can act on, and the exit code), printing a response in the chosen format, reading a
// file or stdin, and Ctrl-C for the commands that follow a job.
#ifndef DHP_API_DHPCTL_SESSION_H_
#define DHP_API_DHPCTL_SESSION_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "api/dhpctl/output.h"
#include "api/tls.h"
#include "google/protobuf/message.h"

namespace dhp::dhpctl {

struct Globals {
  std::string server;
  std::string token_file;
  api::TlsClientFiles tls;
  std::string output = "table";
  int timeout_ms = 30000;
  Format format() const {
    if (output == "json") return Format::kJson;
    if (output == "yaml") return Format::kYaml;
    return Format::kTable;
  }
};

// Now, in microseconds since the epoch.
int64_t Now();

inline constexpr int kInterrupted = 130;  // 128 + SIGINT, as shells report it

// Ctrl-C (and SIGTERM) set a flag instead of killing the process, so that the follow loops can
// clean up (clear the progress line, print buffered lines) and exit kInterrupted.
void CatchInterrupts();
// True once Ctrl-C (or SIGTERM) arrived after CatchInterrupts.
bool Interrupted();
// Sleeps up to `ms`, returning early (false) when interrupted.
bool SleepUnlessInterrupted(int ms);
// The terminal's columns; 0 when stdout is not a terminal.
int TerminalWidth();

// One line a person can act on, on stderr, and the exit code for it: 3 when the controller is
// unreachable, else 1.
int Report(const absl::Status& s, const std::string& server);
// `msg` in the chosen format: `table` for -o table, else the message as JSON or YAML. Returns 0.
int Print(const google::protobuf::Message& msg, const Globals& g, const std::string& table);
// The whole file (`-`: stdin) into `out`; false when it cannot be read.
bool ReadFile(const std::string& path, std::string* out);

}  // namespace dhp::dhpctl

#endif  // DHP_API_DHPCTL_SESSION_H_
