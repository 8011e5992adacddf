// Conversions between the Clock's microseconds and google.protobuf.Timestamp. Thread-safe.
#ifndef DHP_CONTROLLER_TIME_UTIL_H_
#define DHP_CONTROLLER_TIME_UTIL_H_

#include <cstdint>

#include "google/protobuf/timestamp.pb.h"

namespace dhp::controller {

inline google::protobuf::Timestamp MicrosToTimestamp(int64_t micros) {
  google::protobuf::Timestamp ts;
  ts.set_seconds(micros / 1000000);
  ts.set_nanos(static_cast<int32_t>((micros % 1000000) * 1000));
  return ts;
}

inline int64_t TimestampToMicros(const google::protobuf::Timestamp& ts) {
  return ts.seconds() * 1000000 + ts.nanos() / 1000;
}

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_TIME_UTIL_H_
