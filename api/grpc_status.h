// Conversions between absl::Status (used inside dhp) and grpc::Status (on the wire).
// The numeric codes are identical by design; only the types differ. Thread-safe.
#ifndef DHP_API_GRPC_STATUS_H_
#define DHP_API_GRPC_STATUS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace dhp::api {

// gRPC sends a status message as trailing metadata, percent-encoded (a byte outside ASCII takes
// three), and clients refuse metadata over 16 KiB: a message quoting a huge request field (a
// 1 MB node id) reached the caller as RESOURCE_EXHAUSTED "Stream removed" instead of its own
// status. Messages are cut to this many bytes, on a UTF-8 boundary, saying how much was cut.
inline constexpr size_t kMaxGrpcMessageBytes = 4096;

inline std::string CutGrpcMessage(std::string_view m) {
  if (m.size() <= kMaxGrpcMessageBytes) return std::string(m);
  size_t cut = kMaxGrpcMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(m[cut]) & 0xC0) == 0x80) --cut;
  return std::string(m.substr(0, cut)) + "... (" + std::to_string(m.size() - cut) +
         " more bytes)";
}

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      CutGrpcMessage(std::string_view(s.message().data(), s.message().size())));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace dhp::api

#endif  // DHP_API_GRPC_STATUS_H_
