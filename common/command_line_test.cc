#include "common/command_line.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dhp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Parses `args` (after the program's name) into an app with --after, an int64_t flag.
struct Parsed {
  std::optional<int> exit;
  int64_t after = -1;
  std::string out;
  std::string err;
};

Parsed Parse(std::vector<std::string> args) {
  CLI::App app{"test"};
  Parsed p;
  app.add_option("--after", p.after, "An id")->check(WholeNumber());
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  p.exit = ParseCommandLine(app, static_cast<int>(argv.size()), argv.data());
  p.out = ::testing::internal::GetCapturedStdout();
  p.err = ::testing::internal::GetCapturedStderr();
  return p;
}

TEST(CommandLineTest, AWholeNumberIsReadExactlyToTheEndsOfItsRange) {
  Parsed p = Parse({"--after", "9223372036854775807"});
  EXPECT_EQ(p.exit, std::nullopt) << p.err;
  EXPECT_EQ(p.after, INT64_MAX);
  p = Parse({"--after=-9223372036854775808"});
  EXPECT_EQ(p.exit, std::nullopt) << p.err;
  EXPECT_EQ(p.after, INT64_MIN);
  p = Parse({"--after", "42"});
  EXPECT_EQ(p.after, 42);
}

TEST(CommandLineTest, ANumberPastInt64IsRefusedNotSaturated) {
  for (const char* text : {"9223372036854775808", "99999999999999999999",
                           "-9223372036854775809"}) {
    Parsed p = Parse({"--after", text});
    EXPECT_EQ(p.exit, 2) << text;
    EXPECT_EQ(p.after, -1) << text;  // untouched
    EXPECT_THAT(p.err, HasSubstr("--after"));
    EXPECT_THAT(p.err, HasSubstr(std::string("Value ") + text + " is not a whole number"));
  }
}

TEST(CommandLineTest, TextThatIsNotAWholeNumberIsRefused) {
  for (const char* text : {"1e3", "0x10", "1.5", "", " 7", "7 ", "1-2", "abc"}) {
    Parsed p = Parse({"--after", text});
    EXPECT_EQ(p.exit, 2) << "'" << text << "'";
    EXPECT_EQ(p.after, -1) << text;
  }
}

TEST(CommandLineTest, BytesThatAreNotUtf8AreEscapedInTheError) {
  Parsed p = Parse({"--after", "12\xff"});
  EXPECT_EQ(p.exit, 2);
  EXPECT_THAT(p.err, HasSubstr("12\\xFF"));
  EXPECT_THAT(p.err, Not(HasSubstr("\xff")));
  p = Parse({"--bogus\xfe"});  // CLI11's own message: escaped as well
  EXPECT_EQ(p.exit, 2);
  EXPECT_THAT(p.err, HasSubstr("--bogus\\xFE"));
  EXPECT_THAT(p.err, Not(HasSubstr("\xfe")));
}

TEST(CommandLineTest, HelpExitsZeroOnStdout) {
  Parsed p = Parse({"--help"});
  EXPECT_EQ(p.exit, 0);
  EXPECT_THAT(p.out, HasSubstr("--after"));
  EXPECT_EQ(p.err, "");
}

}  // namespace
}  // namespace dhp
