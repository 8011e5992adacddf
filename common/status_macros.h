// Early return on an error Status, and assignment from a StatusOr with early return.
//
//   DHP_RETURN_IF_ERROR(WriteHeader(out));
//   DHP_ASSIGN_OR_RETURN(ModelPreset preset, LoadHfConfig(dir));
//
// Both evaluate their expression once. DHP_ASSIGN_OR_RETURN declares a hidden local per line, so
// use it at most once per line.
#ifndef DHP_COMMON_STATUS_MACROS_H_
#define DHP_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DHP_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::absl::Status dhp_status_ = (expr);       \
    if (!dhp_status_.ok()) return dhp_status_; \
  } while (0)

#define DHP_STATUS_CONCAT_INNER_(a, b) a##b
#define DHP_STATUS_CONCAT_(a, b) DHP_STATUS_CONCAT_INNER_(a, b)

#define DHP_ASSIGN_OR_RETURN(lhs, expr) \
  DHP_ASSIGN_OR_RETURN_IMPL_(DHP_STATUS_CONCAT_(dhp_statusor_, __LINE__), lhs, expr)

#define DHP_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                               \
  if (!var.ok()) return var.status();              \
  lhs = std::move(*var)

#endif  // DHP_COMMON_STATUS_MACROS_H_
