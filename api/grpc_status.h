// Conversions between absl::Status (used inside dhp) and grpc::Status (on the wire).
// The numeric codes are identical by design; only the types differ. Thread-safe.
#ifndef DHP_API_GRPC_STATUS_H_
#define DHP_API_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace dhp::api {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace dhp::api

#endif  // DHP_API_GRPC_STATUS_H_
