// GPT-2's byte-level alphabet: a reversible map from the 256 byte values to 256 printable Unicode
// characters, so that BPE works on arbitrary bytes with a vocabulary of printable strings.
// Printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves; the other
// 68 bytes map, in increasing order, to U+0100, U+0101, ... (space 0x20 becomes U+0120 'Ġ',
// newline 0x0A becomes U+010A 'Ċ').
//
// Thread-safety: the tables are immutable after first use (function-local statics).
#ifndef DHP_WORKER_DATA_BYTE_LEVEL_H_
#define DHP_WORKER_DATA_BYTE_LEVEL_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace dhp {
namespace data {

// The Unicode code point that represents byte `b`.
char32_t ByteToCodePoint(uint8_t b);

// The byte a code point represents, or -1 when it is not part of the byte-level alphabet.
int CodePointToByte(char32_t cp);

// Maps each byte of `bytes` to its character and returns the result as UTF-8.
std::string BytesToByteLevel(absl::string_view bytes);

// The inverse of BytesToByteLevel. Returns false when `symbols` is not valid UTF-8 or holds a
// character outside the byte-level alphabet.
bool ByteLevelToBytes(absl::string_view symbols, std::string* bytes);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// Decodes one UTF-8 character at `*pos`, advancing it. Returns false on invalid UTF-8
// (overlong forms, surrogates and code points above U+10FFFF are invalid).
bool NextUtf8(absl::string_view s, size_t* pos, char32_t* cp);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_BYTE_LEVEL_H_
