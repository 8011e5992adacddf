#include "common/yaml_syntax.h"

#include <yaml.h>

#include "absl/strings/str_cat.h"

namespace dhp {

absl::Status CheckYamlSyntax(std::string_view text) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return absl::ResourceExhaustedError("libyaml: no memory");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  absl::Status status;
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
    yaml_event_delete(&event);
  }
  yaml_parser_delete(&parser);
  return status;
}

}  // namespace dhp
