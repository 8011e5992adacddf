#include "tests/grpc_raw.h"

#include <chrono>
#include <memory>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"

namespace dhp::tests {

std::string BufferBytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

grpc::ByteBuffer BytesBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);  // an empty slice still makes a valid (empty) message
  return grpc::ByteBuffer(&slice, 1);
}

bool Step(grpc::CompletionQueue& cq, void* tag) {
  void* got = nullptr;
  bool ok = false;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10);
  if (cq.AsyncNext(&got, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) return false;
  EXPECT_EQ(got, tag);
  return ok;
}

std::pair<grpc::Status, std::string> GenericUnary(const std::string& target,
                                                  const std::string& method,
                                                  const std::string& request) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, method, BytesBuffer(request), &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  int tag = 1;
  call->Finish(&response, &status, &tag);
  EXPECT_TRUE(Step(cq, &tag));
  cq.Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (cq.Next(&ignored_tag, &ignored_ok)) {
  }
  return {status, status.ok() ? BufferBytes(response) : ""};
}

}  // namespace dhp::tests
