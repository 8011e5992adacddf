// A YAML syntax check with libyaml (Debian's libyaml-0-2) before yaml-cpp sees a text.
//
// Why: yaml-cpp 0.7 (Debian 12's) allocates without bound on some malformed input, for
// example a flow entry "," outside a flow collection: `YAML::LoadAll(",")` grows until it
// runs out of memory. One byte in a REST body would take the controller down. Found by
// fuzz/spec_reader_fuzzer; regression inputs in fuzz/corpus/spec_reader/ and
// common/proto_yaml_test.cc. libyaml's event parser is linear in the input and refuses such
// text, so CheckYamlSyntax runs first and yaml-cpp only reads text libyaml accepts.
#ifndef DHP_COMMON_YAML_SYNTAX_H_
#define DHP_COMMON_YAML_SYNTAX_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace dhp {

// Collections nest at most this deep (as JSON bodies do, api/rest_body.h).
inline constexpr int kMaxYamlDepth = 64;

// OK when `text` is a well-formed YAML stream nesting at most kMaxYamlDepth deep; else
// INVALID_ARGUMENT "malformed YAML at line L, column C: <libyaml's problem>" or "malformed YAML
// at line L: nests deeper than 64 levels".
absl::Status CheckYamlSyntax(std::string_view text);

// The documents in `text` as yaml-cpp parses it, counted up to `limit`; throws what yaml-cpp
// throws on malformed text. Use it instead of YAML::LoadAll: on a token its parser cannot place
// and does not consume, yaml-cpp 0.7 yields an empty document and is at the same token again,
// so LoadAll loops until memory runs out. CheckYamlSyntax refuses most such text, not all:
// "&a s\n," is one scalar "s ," to libyaml and a scalar, then a stray ',', to yaml-cpp (found
// by fuzz/spec_reader_fuzzer).
int CountYamlDocuments(const std::string& text, int limit);

}  // namespace dhp

#endif  // DHP_COMMON_YAML_SYNTAX_H_
