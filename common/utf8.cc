#include "common/utf8.h"

#include <algorithm>
#include <cstdio>

namespace dhp {

size_t InvalidUtf8At(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + n >= s.size()) return i;  // truncated
    for (int k = 1; k <= n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return i;
    }
    i += n + 1;
  }
  return std::string_view::npos;
}

std::string Utf8Error(std::string_view text) {
  const size_t bad = InvalidUtf8At(text);
  if (bad == std::string_view::npos) return "";
  const std::string_view before = text.substr(0, bad);
  const size_t line_start =
      before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
  char buf[128];
  std::snprintf(buf, sizeof(buf),
                "not valid UTF-8: byte 0x%02X at line %zu, column %zu (offset %zu)",
                static_cast<unsigned>(static_cast<unsigned char>(text[bad])),
                static_cast<size_t>(std::count(before.begin(), before.end(), '\n')) + 1,
                bad - line_start + 1, bad);
  return buf;
}

namespace {

template <typename Replace>
std::string MapInvalidBytes(std::string_view text, Replace replace) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t bad = InvalidUtf8At(text);
    if (bad == std::string_view::npos) {
      out.append(text);
      break;
    }
    out.append(text.substr(0, bad));
    replace(static_cast<unsigned char>(text[bad]), &out);
    text.remove_prefix(bad + 1);
  }
  return out;
}

}  // namespace

std::string ReplaceInvalidUtf8(std::string_view text, std::string_view replacement) {
  return MapInvalidBytes(text, [&](unsigned char, std::string* out) { out->append(replacement); });
}

std::string EscapeInvalidUtf8(std::string_view text) {
  return MapInvalidBytes(text, [](unsigned char c, std::string* out) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02X", static_cast<unsigned>(c));
    out->append(buf);
  });
}

std::string CutUtf8(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end)) + "...";
}

}  // namespace dhp
