#include "common/proto_wire_budget.h"

#include <cstddef>
#include <cstdint>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace dhp {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormatLite;

// Nesting deeper than protobuf's own parser accepts (its default recursion limit).
constexpr int kMaxDepth = 100;

// The message type of field `number` of `type` (null: not a known message field), remembered
// for one count: a request repeats the same few fields thousands of times (a relay's batch:
// ~25 heartbeats, each with 8 ranks' reports of ~24 metrics), and FindFieldByNumber is a
// hash-table search each time. Direct-mapped: a clash only costs the search again.
class InnerTypes {
 public:
  const Descriptor* Of(const Descriptor* type, int number) {
    if (type == nullptr) return nullptr;
    Entry& e = entries_[(reinterpret_cast<uintptr_t>(type) / 64 + number * 31u) % kSize];
    if (e.type != type || e.number != number) {
      const FieldDescriptor* f = type->FindFieldByNumber(number);
      e.type = type;
      e.number = number;
      e.inner = f != nullptr && f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE
                    ? f->message_type()
                    : nullptr;
    }
    return e.inner;
  }

 private:
  static constexpr size_t kSize = 64;
  struct Entry {
    const Descriptor* type = nullptr;
    int number = 0;
    const Descriptor* inner = nullptr;
  };
  Entry entries_[kSize];
};

// Counts the fields of one message (of `type`; null: unknown, not looked into) into `count`
// until the stream's current limit or a group's end. False when it must stop: past `limit`,
// too deep, or malformed.
bool CountMessage(CodedInputStream& in, const Descriptor* type, int depth, int64_t limit,
                  InnerTypes& types, int64_t& count) {
  if (depth > kMaxDepth) return false;
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return true;  // the end (or malformed: the parser says so)
    const WireFormatLite::WireType wire = WireFormatLite::GetTagWireType(tag);
    if (wire == WireFormatLite::WIRETYPE_END_GROUP) return true;
    if (wire != WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        wire != WireFormatLite::WIRETYPE_START_GROUP) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      continue;
    }
    if (++count > limit) return false;
    const Descriptor* inner = types.Of(type, WireFormatLite::GetTagFieldNumber(tag));
    if (wire == WireFormatLite::WIRETYPE_START_GROUP) {
      if (!CountMessage(in, inner, depth + 1, limit, types, count)) return false;
      continue;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    if (inner == nullptr) {
      if (!in.Skip(static_cast<int>(length))) return false;
      continue;
    }
    const CodedInputStream::Limit outer = in.PushLimit(static_cast<int>(length));
    if (!CountMessage(in, inner, depth + 1, limit, types, count)) return false;
    if (in.BytesUntilLimit() != 0) return false;  // a group's end inside: malformed
    in.PopLimit(outer);
  }
}

}  // namespace

int64_t CountWireElements(google::protobuf::io::ZeroCopyInputStream* in, const Descriptor& type,
                          int64_t limit) {
  CodedInputStream coded(in);
  int64_t count = 0;
  InnerTypes types;
  CountMessage(coded, &type, 0, limit, types, count);
  return count;
}

}  // namespace dhp
