// What every dhp binary's command line shares, on top of CLI11 (2.1, Debian's):
//   app.add_option("--after", after, "...")->check(dhp::WholeNumber());
//   if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;
//
// CLI11 2.1 reads a 64-bit integer with strtoll and ignores its overflow, so that
// "99999999999999999999" becomes 9223372036854775807 without a word; WholeNumber refuses it,
// naming the flag and the text given. ParseCommandLine prints CLI11's usage errors with any
// bytes that are not UTF-8 escaped as \xNN (a terminal gets text, not the raw bytes), and exits
// 2 on them, 0 after --help.
#ifndef DHP_COMMON_COMMAND_LINE_H_
#define DHP_COMMON_COMMAND_LINE_H_

#include <optional>

#include "CLI/CLI.hpp"

namespace dhp {

// Accepts a base-10 integer that fits in int64_t (an optional sign, digits, nothing else).
CLI::Validator WholeNumber();

// Parses; nullopt when the program should go on, else the code to exit with (after printing
// --help's text, or the error and a pointer to --help).
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

}  // namespace dhp

#endif  // DHP_COMMON_COMMAND_LINE_H_
