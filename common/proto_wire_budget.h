// How much a protobuf message still in its binary encoding would allocate, counted before it
// is parsed.
//
// Why: an empty embedded message is 2 bytes on the wire and a couple of hundred bytes once
// parsed, so a 16 MiB request of 8 million empty HeartbeatRequest.progress entries took 1.8 GB
// of the controller's memory before any check on the parsed message could refuse it (found by
// an outside client, stop 48). The gRPC server (api/grpc_decode.h) counts first and refuses a
// request over its budget unparsed.
//
// Thread-safe (no state).
#ifndef DHP_COMMON_PROTO_WIRE_BUDGET_H_
#define DHP_COMMON_PROTO_WIRE_BUDGET_H_

#include <cstdint>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace dhp {

// The length-delimited fields (embedded messages, strings, bytes, packed arrays) and groups in
// `in`, a message of type `type`, at every depth the descriptor knows (a field this build does
// not know counts once and is not looked into). Counting stops once past `limit`: a result
// over `limit` means "more than limit". Malformed bytes end the count where they start; the
// parser will refuse them. Reads `in` to its end (or to where it stopped).
int64_t CountWireElements(google::protobuf::io::ZeroCopyInputStream* in,
                          const google::protobuf::Descriptor& type, int64_t limit);

}  // namespace dhp

#endif  // DHP_COMMON_PROTO_WIRE_BUDGET_H_
