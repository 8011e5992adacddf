#include "common/yaml_syntax.h"

#include <yaml.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/parser.h"

namespace dhp {
namespace {

// Counts events only: what the parser makes of the text, without building nodes.
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// libyaml's scanner stacks a possible key per open collection and looks at all of them for
// each token, so its cost grows with the square of the depth: '[' times 100,000 took 14 s of a
// REST thread, and a 4 MiB body allows 40 times that (found by an outside client). It hands out
// events as it goes, so stopping at the first one too deep costs next to nothing.
absl::Status TooDeep(int line) {
  return absl::InvalidArgumentError(absl::StrCat("malformed YAML at line ", line,
                                                 ": nests deeper than ", kMaxYamlDepth,
                                                 " levels"));
}

}  // namespace

absl::Status CheckYamlSyntax(std::string_view text) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return absl::ResourceExhaustedError("libyaml: no memory");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  absl::Status status;
  int depth = 0;
  for (bool done = false; !done;) {
    yaml_event_t event;
    if (!yaml_parser_parse(&parser, &event)) {
      const yaml_mark_t& mark = parser.problem_mark;
      status = absl::InvalidArgumentError(
          absl::StrCat("malformed YAML at line ", mark.line + 1, ", column ", mark.column + 1, ": ",
                       parser.problem != nullptr ? parser.problem : "syntax error",
                       parser.context != nullptr ? absl::StrCat(" (", parser.context, ")") : ""));
      break;
    }
    done = event.type == YAML_STREAM_END_EVENT;
    const bool opens =
        event.type == YAML_SEQUENCE_START_EVENT || event.type == YAML_MAPPING_START_EVENT;
    const bool closes =
        event.type == YAML_SEQUENCE_END_EVENT || event.type == YAML_MAPPING_END_EVENT;
    depth += opens ? 1 : closes ? -1 : 0;
    const size_t line = event.start_mark.line + 1;
    yaml_event_delete(&event);
    if (depth > kMaxYamlDepth) {
      status = TooDeep(static_cast<int>(line));
      break;
    }
  }
  yaml_parser_delete(&parser);
  return status;
}

int CountYamlDocuments(const std::string& text, int limit) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  int n = 0;
  while (n < limit && parser.HandleNextDocument(counter)) ++n;
  return n;
}

}  // namespace dhp
