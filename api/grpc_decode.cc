#include "api/grpc_decode.h"

#include <string>
#include <vector>

#include "common/proto_utf8.h"
#include "common/proto_wire_budget.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace dhp::api {

absl::Status DecodeRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* msg) {
  {
    grpc::ByteBuffer copy(bytes);  // shares the slices; the reader needs a mutable buffer
    grpc::ProtoBufferReader reader(&copy);
    const int64_t n = CountWireElements(&reader, *msg->GetDescriptor(), kMaxRequestElements);
    if (n > kMaxRequestElements) {
      return absl::ResourceExhaustedError(
          "request (protobuf " + msg->GetTypeName() + "): more than " +
          std::to_string(kMaxRequestElements) + " messages, strings and bytes fields in " +
          std::to_string(bytes.Length()) + " bytes; send fewer per request");
    }
  }
  grpc::ByteBuffer copy(bytes);  // shares the slices; the reader needs a mutable buffer
  grpc::ProtoBufferReader reader(&copy);
  if (msg->ParseFromZeroCopyStream(&reader)) return absl::OkStatus();
  std::vector<grpc::Slice> slices;
  std::string wire;
  if (bytes.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      wire.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  const std::string what = "request (protobuf " + msg->GetTypeName() + "): ";
  const std::string field = InvalidUtf8InEncoding(wire, *msg->GetDescriptor());
  if (!field.empty()) return absl::InvalidArgumentError(what + field);
  return absl::InvalidArgumentError(what + std::to_string(wire.size()) +
                                    " bytes that do not decode as this message (truncated, or "
                                    "not protobuf's binary encoding)");
}

}  // namespace dhp::api
