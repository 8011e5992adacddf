#include "common/yaml_syntax.h"

#include <yaml.h>

#include <map>

#include "absl/strings/str_cat.h"

namespace dhp {

// Builds a YamlDocument from libyaml's events, one at a time.
class YamlBuilder {
 public:
  explicit YamlBuilder(YamlDocument* doc) : doc_(doc) {}

  // Takes one event; an error ends the reading.
  absl::Status Take(const yaml_event_t& e) {
    switch (e.type) {
      case YAML_DOCUMENT_START_EVENT:
        if (++documents_ > 1) {
          return absl::InvalidArgumentError(
              "expected one YAML document, got more (a '---' separator)");
        }
        return absl::OkStatus();
      case YAML_SCALAR_EVENT:
        return Scalar(e);
      case YAML_ALIAS_EVENT:
        return Alias(e);
      case YAML_SEQUENCE_START_EVENT:
        return Open(YamlNode::Kind::kSequence, e.data.sequence_start.anchor, e.start_mark);
      case YAML_MAPPING_START_EVENT:
        return Open(YamlNode::Kind::kMap, e.data.mapping_start.anchor, e.start_mark);
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        Close();
        return absl::OkStatus();
      default:  // stream start and end, document end
        return absl::OkStatus();
    }
  }

 private:
  struct Collection {
    YamlNode* node;
    std::string anchor;  // registered when the node ends
    const YamlNode* key = nullptr;  // a mapping's key waiting for its value
  };

  static std::string Text(const yaml_char_t* s) {
    return s == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(s));
  }

  static bool ReadsAsNull(const yaml_event_t& e) {
    if (e.data.scalar.style != YAML_PLAIN_SCALAR_STYLE || e.data.scalar.tag != nullptr) {
      return false;
    }
    const std::string_view v(reinterpret_cast<const char*>(e.data.scalar.value),
                             e.data.scalar.length);
    return v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL";
  }

  absl::Status Scalar(const yaml_event_t& e) {
    YamlNode& node = doc_->nodes_.emplace_back();
    if (!ReadsAsNull(e)) {
      node.kind_ = YamlNode::Kind::kScalar;
      node.scalar_.assign(reinterpret_cast<const char*>(e.data.scalar.value),
                          e.data.scalar.length);
    }
    if (e.data.scalar.anchor != nullptr) anchors_[Text(e.data.scalar.anchor)] = &node;
    Attach(&node);
    return absl::OkStatus();
  }

  absl::Status Alias(const yaml_event_t& e) {
    const std::string name = Text(e.data.alias.anchor);
    const auto it = anchors_.find(name);
    if (it == anchors_.end()) {
      // libyaml's anchor names are ASCII letters, digits, '-' and '_': cut, never escaped.
      constexpr size_t kShown = 80;
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed YAML at line ", e.start_mark.line + 1, ", column ", e.start_mark.column + 1,
          ": *", name.substr(0, kShown), name.size() > kShown ? "..." : "",
          " names no anchor defined before it"));
    }
    Attach(it->second);
    return absl::OkStatus();
  }

  absl::Status Open(YamlNode::Kind kind, const yaml_char_t* anchor, const yaml_mark_t& mark) {
    if (static_cast<int>(open_.size()) >= kMaxYamlDepth) {
      return absl::InvalidArgumentError(absl::StrCat("malformed YAML at line ", mark.line + 1,
                                                     ": nests deeper than ", kMaxYamlDepth,
                                                     " levels"));
    }
    YamlNode& node = doc_->nodes_.emplace_back();
    node.kind_ = kind;
    Attach(&node);
    open_.push_back(Collection{&node, Text(anchor)});
    return absl::OkStatus();
  }

  void Close() {
    if (open_.empty()) return;  // libyaml pairs them; never happens
    if (!open_.back().anchor.empty()) anchors_[open_.back().anchor] = open_.back().node;
    open_.pop_back();
  }

  // `node` is the next value of the innermost open collection, or the document's root.
  void Attach(const YamlNode* node) {
    if (open_.empty()) {
      doc_->root_ = node;
      return;
    }
    Collection& parent = open_.back();
    if (parent.node->kind_ == YamlNode::Kind::kSequence) {
      parent.node->items_.push_back(node);
    } else if (parent.key == nullptr) {
      parent.key = node;
    } else {
      parent.node->pairs_.emplace_back(parent.key, node);
      parent.key = nullptr;
    }
  }

  YamlDocument* doc_;
  std::vector<Collection> open_;  // the collections not yet ended, outermost first
  std::map<std::string, const YamlNode*> anchors_;
  int documents_ = 0;
};

absl::Status ReadYaml(std::string_view text, YamlDocument* doc) {
  *doc = YamlDocument();
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return absl::ResourceExhaustedError("libyaml: no memory");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  YamlBuilder builder(doc);
  absl::Status status;
  for (bool done = false; !done && status.ok();) {
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
    status = builder.Take(event);
    yaml_event_delete(&event);
  }
  yaml_parser_delete(&parser);
  if (!status.ok()) *doc = YamlDocument();
  return status;
}

}  // namespace dhp
