// Decoding a gRPC request's bytes ourselves (raw callback methods), so that a request protobuf
// refuses gets INVALID_ARGUMENT saying why (the field whose text is not UTF-8, or that the
// bytes do not decode) instead of gRPC's bare answer. Used by dhp's gRPC server
// (api/grpc_server.cc) and by dhp-relay (worker/relay/relay_server.cc). Thread-safe.
#ifndef DHP_API_GRPC_DECODE_H_
#define DHP_API_GRPC_DECODE_H_

#include "absl/status/status.h"
#include "api/service.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace dhp::api {

// `bytes` decoded into `msg`, or INVALID_ARGUMENT naming the message type and either the field
// whose text is not UTF-8 or the number of bytes that do not decode; RESOURCE_EXHAUSTED,
// unparsed, when it holds more than kMaxRequestElements.
absl::Status DecodeRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* msg);

}  // namespace dhp::api

#endif  // DHP_API_GRPC_DECODE_H_
