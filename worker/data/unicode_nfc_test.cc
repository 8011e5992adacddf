#include "worker/data/unicode_nfc.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dhp {
namespace data {
namespace {

using ::testing::HasSubstr;

std::string Nfc(const std::string& text) {
  std::string storage;
  absl::StatusOr<absl::string_view> out = ToNfc(text, &storage);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? std::string(*out) : std::string();
}

TEST(UnicodeNfcTest, ComposesDecomposedAccents) {
  EXPECT_EQ(Nfc("e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
  EXPECT_EQ(Nfc("Cafe\xCC\x81 na\xC3\xAFve"), "Caf\xC3\xA9 na\xC3\xAFve");
  EXPECT_EQ(Nfc("A\xCC\x8A"), "\xC3\x85");  // A + ring -> Å
  EXPECT_EQ(Nfc("\xC3\xA9"), "\xC3\xA9");   // already composed
}

TEST(UnicodeNfcTest, ComposesHangulJamo) {
  // U+1100 (choseong kiyeok) + U+1161 (jungseong a) -> U+AC00 (가); + U+11A8 -> U+AC01 (각).
  EXPECT_EQ(Nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");
  EXPECT_EQ(Nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");
  // LV syllable + trailing jamo composes too: U+AC00 + U+11A8 -> U+AC01.
  EXPECT_EQ(Nfc("\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");
  // A lone leading jamo stays.
  EXPECT_EQ(Nfc("\xE1\x84\x80"), "\xE1\x84\x80");
}

TEST(UnicodeNfcTest, SingletonsAndCompatibilityIdeographs) {
  EXPECT_EQ(Nfc("\xEF\xA4\x80"), "\xE8\xB1\x88");  // U+F900 -> U+8C48 (singleton)
  EXPECT_EQ(Nfc("\xE2\x84\xAB"), "\xC3\x85");      // U+212B ANGSTROM SIGN -> U+00C5
  EXPECT_EQ(Nfc("\xE2\x84\xA6"), "\xCE\xA9");      // U+2126 OHM SIGN -> U+03A9
  // Compatibility (not canonical) mappings are NFKC's, not NFC's: U+FB01 (ﬁ) stays.
  EXPECT_EQ(Nfc("\xEF\xAC\x81"), "\xEF\xAC\x81");
}

TEST(UnicodeNfcTest, ReordersCombiningMarks) {
  // q + dot below (ccc 220) + dot above (ccc 230) is canonical order already; reversed input is
  // reordered. q has no precomposed forms, so the marks stay separate.
  const std::string ordered = "q\xCC\xA3\xCC\x87";
  EXPECT_EQ(Nfc("q\xCC\x87\xCC\xA3"), ordered);
  EXPECT_EQ(Nfc(ordered), ordered);
  // s + dot above + dot below -> U+1E69 (ṩ): reordering, then composition.
  EXPECT_EQ(Nfc("s\xCC\x87\xCC\xA3"), "\xE1\xB9\xA9");
}

TEST(UnicodeNfcTest, AsciiAndNfcTextAreReturnedWithoutCopy) {
  std::string storage = "untouched";
  const std::string ascii = "plain ASCII text\r\n\t";
  absl::StatusOr<absl::string_view> out = ToNfc(ascii, &storage);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->data(), ascii.data());
  const std::string cjk = "\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80";
  out = ToNfc(cjk, &storage);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->data(), cjk.data());
  EXPECT_EQ(storage, "untouched");
}

TEST(UnicodeNfcTest, EmptyString) {
  std::string storage;
  absl::StatusOr<absl::string_view> out = ToNfc("", &storage);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->empty());
}

TEST(UnicodeNfcTest, InvalidUtf8IsAnErrorNamingTheOffset) {
  std::string storage;
  for (const std::string bad : {"ok \xC3(", "e\xCC\x81\xFF", "\xED\xA0\x80" /* surrogate */,
                                "\xC0\xAF" /* overlong */, "abc\xE2\x82"}) {
    absl::StatusOr<absl::string_view> out = ToNfc(bad, &storage);
    ASSERT_FALSE(out.ok()) << bad;
    EXPECT_THAT(out.status().message(), HasSubstr("not valid UTF-8 at byte"));
  }
  EXPECT_THAT(ToNfc("e\xCC\x81\xFF", &storage).status().message(), HasSubstr("byte 3"));
}

}  // namespace
}  // namespace data
}  // namespace dhp
