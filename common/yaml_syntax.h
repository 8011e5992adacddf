// YAML read with libyaml (Debian's libyaml-0-2): one pass over the text checks its syntax and
// builds the document's nodes, which common/proto_yaml.cc reads into a proto.
//
// Why libyaml and not yaml-cpp: yaml-cpp 0.7 (Debian 12's) allocates without bound on some
// malformed input (`YAML::LoadAll(",")` grows until it runs out of memory; found by
// fuzz/spec_reader_fuzzer, regression inputs in fuzz/corpus/spec_reader/ and
// common/proto_yaml_test.cc), and its scanner cost a fifth of the controller's CPU per
// SubmitJob (bench/results/control_plane.md, stop 51). libyaml's event parser is linear in the
// input; the text was checked with it before yaml-cpp read it anyway.
#ifndef DHP_COMMON_YAML_SYNTAX_H_
#define DHP_COMMON_YAML_SYNTAX_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace dhp {

// Collections nest at most this deep (as JSON bodies do, api/rest_body.h).
inline constexpr int kMaxYamlDepth = 64;

// One node of a YAML document. A plain scalar that YAML reads as null ("", "~", "null", "Null",
// "NULL", with no tag) is a null node; a quoted one is a scalar. An alias is the node of its
// anchor itself, so a node may be reached from several places.
class YamlNode {
 public:
  enum class Kind : uint8_t { kNull, kScalar, kMap, kSequence };
  using Pair = std::pair<const YamlNode*, const YamlNode*>;

  Kind kind() const { return kind_; }
  bool IsNull() const { return kind_ == Kind::kNull; }
  bool IsScalar() const { return kind_ == Kind::kScalar; }
  bool IsMap() const { return kind_ == Kind::kMap; }
  bool IsSequence() const { return kind_ == Kind::kSequence; }
  const std::string& Scalar() const { return scalar_; }  // empty unless a scalar
  // A mapping's keys and values in the text's order, a key given twice included.
  const std::vector<Pair>& pairs() const { return pairs_; }
  const std::vector<const YamlNode*>& items() const { return items_; }  // a sequence's

 private:
  friend class YamlBuilder;
  Kind kind_ = Kind::kNull;
  std::string scalar_;
  std::vector<Pair> pairs_;
  std::vector<const YamlNode*> items_;
};

// The nodes of one document; root() is null when the text holds none (empty, or comments).
class YamlDocument {
 public:
  const YamlNode* root() const { return root_; }

 private:
  friend class YamlBuilder;
  std::deque<YamlNode> nodes_;
  const YamlNode* root_ = nullptr;
};

// Reads `text` into `doc` (cleared first). INVALID_ARGUMENT, and `doc` empty, when the text is
// not one well-formed YAML document nesting at most kMaxYamlDepth deep:
//   "malformed YAML at line L, column C: <libyaml's problem> (<its context>)",
//   "malformed YAML at line L: nests deeper than 64 levels",
//   "malformed YAML at line L, column C: *NAME names no anchor defined before it" (an anchor
//     counts from its node's end, so that no node contains itself),
//   "expected one YAML document, got more (a '---' separator)".
absl::Status ReadYaml(std::string_view text, YamlDocument* doc);

}  // namespace dhp

#endif  // DHP_COMMON_YAML_SYNTAX_H_
