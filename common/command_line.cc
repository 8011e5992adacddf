#include "common/command_line.h"

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "common/utf8.h"

namespace dhp {

CLI::Validator WholeNumber() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t value = 0;
        const bool digits = !text.empty() && text.find_first_not_of("+-0123456789") ==
                                                 std::string::npos;
        if (digits && absl::SimpleAtoi(text, &value)) return "";
        return "Value " + CutUtf8(EscapeInvalidUtf8(text), 64) +
               " is not a whole number from -9223372036854775808 to 9223372036854775807";
      },
      "INT64");
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    const int code = app.exit(e, out, err);
    std::cout << out.str() << std::flush;
    std::cerr << EscapeInvalidUtf8(err.str());
    return code == 0 ? 0 : 2;
  }
}

}  // namespace dhp
