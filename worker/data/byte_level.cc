#include "worker/data/byte_level.h"

#include <array>

namespace dhp {
namespace data {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int16_t, 324> cp_to_byte{};  // every mapped code point is below 256 + 68
};

bool IsPrintableLatin1(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

const Tables& GetTables() {
  static const Tables* tables = [] {
    auto* t = new Tables;
    t->cp_to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = IsPrintableLatin1(b) ? static_cast<char32_t>(b)
                                               : static_cast<char32_t>(256 + next++);
      t->byte_to_cp[b] = cp;
      t->cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

char32_t ByteToCodePoint(uint8_t b) { return GetTables().byte_to_cp[b]; }

int CodePointToByte(char32_t cp) {
  const Tables& t = GetTables();
  return cp < t.cp_to_byte.size() ? t.cp_to_byte[cp] : -1;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool NextUtf8(absl::string_view s, size_t* pos, char32_t* cp) {
  const size_t i = *pos;
  if (i >= s.size()) return false;
  const auto u = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = u(i);
  int len;
  char32_t value;
  if (b0 < 0x80) {
    len = 1;
    value = b0;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    value = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    value = b0 & 0x07;
  } else {
    return false;
  }
  if (i + len > s.size()) return false;
  for (int k = 1; k < len; ++k) {
    if ((u(i + k) & 0xC0) != 0x80) return false;
    value = (value << 6) | (u(i + k) & 0x3F);
  }
  if ((len == 3 && value < 0x800) || (len == 4 && (value < 0x10000 || value > 0x10FFFF)) ||
      (value >= 0xD800 && value <= 0xDFFF)) {
    return false;
  }
  *pos = i + len;
  *cp = value;
  return true;
}

std::string BytesToByteLevel(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(c)), &out);
  return out;
}

bool ByteLevelToBytes(absl::string_view symbols, std::string* bytes) {
  size_t pos = 0;
  char32_t cp;
  while (pos < symbols.size()) {
    if (!NextUtf8(symbols, &pos, &cp)) return false;
    const int b = CodePointToByte(cp);
    if (b < 0) return false;
    bytes->push_back(static_cast<char>(b));
  }
  return true;
}

}  // namespace data
}  // namespace dhp
