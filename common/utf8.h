// UTF-8 well-formedness, checked where text enters: a protobuf string holding ill-formed UTF-8
// does not serialise, and a stored one does not parse again. No dependencies; thread-safe.
#ifndef DHP_COMMON_UTF8_H_
#define DHP_COMMON_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace dhp {

// The offset of the first byte that does not start or continue a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points above U+10FFFF are ill-formed), or npos.
size_t InvalidUtf8At(std::string_view s);

// "" for well-formed text, else "not valid UTF-8: byte 0xFF at line 2, column 25 (offset 32)".
std::string Utf8Error(std::string_view text);

// `text` with every byte that InvalidUtf8At would stop at replaced by `replacement` (well-formed
// sequences are kept as they are).
std::string ReplaceInvalidUtf8(std::string_view text, std::string_view replacement);

// `text` with every ill-formed byte written as the four characters \xFF: for log lines and
// messages that must stay valid UTF-8 while still showing the bytes.
std::string EscapeInvalidUtf8(std::string_view text);

// At most `max` bytes of `text`, cut on a character boundary, with "..." after them when cut:
// for quoting what a client sent in an error message.
std::string CutUtf8(std::string_view text, size_t max);

}  // namespace dhp

#endif  // DHP_COMMON_UTF8_H_
