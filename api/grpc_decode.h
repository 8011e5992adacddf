// Decoding a gRPC request's bytes ourselves (raw callback methods), so that a request protobuf
// refuses gets INVALID_ARGUMENT saying why (the field whose text is not UTF-8, or that the
// bytes do not decode) instead of gRPC's bare answer. Used by dhp's gRPC server
// (api/grpc_server.cc) and by dhp-relay (worker/relay/relay_server.cc). Thread-safe.
#ifndef DHP_API_GRPC_DECODE_H_
#define DHP_API_GRPC_DECODE_H_

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace dhp::api {

// The most length-delimited fields (messages, strings, bytes) and groups one request may hold, at
// every depth (common/proto_wire_budget.h): about 60 MB once parsed at worst. A 16 MiB request
// of empty messages would otherwise be 8 million of them, 1.8 GB parsed.
inline constexpr int64_t kMaxRequestElements = 262144;

// `bytes` decoded into `msg`, or INVALID_ARGUMENT naming the message type and either the field
// whose text is not UTF-8 or the number of bytes that do not decode; RESOURCE_EXHAUSTED,
// unparsed, when it holds more than kMaxRequestElements.
absl::Status DecodeRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* msg);

}  // namespace dhp::api

#endif  // DHP_API_GRPC_DECODE_H_
