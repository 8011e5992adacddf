#include "worker/data/unicode_nfc.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/utypes.h>

#include <climits>

#include "absl/strings/str_cat.h"
#include "worker/data/byte_level.h"

namespace dhp {
namespace data {
namespace {

bool IsAscii(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// OK, or the offset of the first ill-formed UTF-8 sequence.
absl::Status CheckUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    char32_t cp;
    if (!NextUtf8(text, &i, &cp)) {
      return absl::InvalidArgumentError(
          absl::StrCat("text is not valid UTF-8 at byte ", start, " (NFC normalizer)"));
    }
  }
  return absl::OkStatus();
}

absl::Status IcuError(const char* what, UErrorCode code) {
  return absl::InternalError(absl::StrCat("ICU ", what, " failed: ", u_errorName(code)));
}

}  // namespace

absl::StatusOr<absl::string_view> ToNfc(absl::string_view text, std::string* storage) {
  if (IsAscii(text)) return text;  // ASCII is NFC
  if (absl::Status s = CheckUtf8(text); !s.ok()) return s;
  if (text.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("text of ", text.size(), " bytes is too long for NFC (at most 2^31 - 1)"));
  }
  UErrorCode code = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(code);
  if (U_FAILURE(code)) return IcuError("getNFCInstance", code);
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  const UBool normalized = nfc->isNormalizedUTF8(piece, code);
  if (U_FAILURE(code)) return IcuError("isNormalizedUTF8", code);
  if (normalized) return text;
  storage->clear();
  icu::StringByteSink<std::string> sink(storage, static_cast<int32_t>(text.size()));
  nfc->normalizeUTF8(0, piece, sink, nullptr, code);
  if (U_FAILURE(code)) return IcuError("normalizeUTF8", code);
  return absl::string_view(*storage);
}

}  // namespace data
}  // namespace dhp
