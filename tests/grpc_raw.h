// Raw gRPC calls for tests: request bytes no generated stub would send (invalid UTF-8,
// truncated messages) through grpc::GenericStub, and the ByteBuffer conversions around them.
// Thread-safety: none needed (no shared state).
#ifndef DHP_TESTS_GRPC_RAW_H_
#define DHP_TESTS_GRPC_RAW_H_

#include <string>
#include <utility>

#include "grpcpp/grpcpp.h"

namespace dhp::tests {

std::string BufferBytes(const grpc::ByteBuffer& buffer);
grpc::ByteBuffer BytesBuffer(const std::string& bytes);

// Waits up to 10 s for the completion of `tag` on `cq` (each step of a test has one operation
// in flight); false when it did not complete, or completed not ok.
bool Step(grpc::CompletionQueue& cq, void* tag);

// One unary call of `method` ("/dhp.v1.WorkerService/Heartbeat") on `target` (host:port,
// plaintext) with raw request bytes: the status and, when OK, the response bytes.
std::pair<grpc::Status, std::string> GenericUnary(const std::string& target,
                                                  const std::string& method,
                                                  const std::string& request);

}  // namespace dhp::tests

#endif  // DHP_TESTS_GRPC_RAW_H_
