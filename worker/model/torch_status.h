// Turns LibTorch exceptions into absl::Status at a boundary (the rank's step loop, checkpoint
// loading), as DESIGN.md asks: LibTorch throws c10::Error, dhp's interfaces return Status.
//
// Mapping: c10::ValueError / IndexError / TypeError -> InvalidArgument (dhp's model code checks
// its inputs with TORCH_CHECK_VALUE, e.g. image grids that do not match the pixels);
// OutOfMemoryError -> ResourceExhausted; NotImplementedError -> Unimplemented; any other
// c10::Error (broken invariants inside LibTorch) -> Internal. The message is LibTorch's without
// its C++ backtrace, prefixed by `context`. Header-only; thread-safe.
#ifndef DHP_WORKER_MODEL_TORCH_STATUS_H_
#define DHP_WORKER_MODEL_TORCH_STATUS_H_

#include <c10/util/Exception.h>

#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace dhp {

inline absl::Status TorchErrorToStatus(const c10::Error& e, std::string_view context) {
  std::string msg = absl::StrCat(std::string(context), ": ", e.what_without_backtrace());
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return absl::ResourceExhaustedError(msg);
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return absl::UnimplementedError(msg);
  if (dynamic_cast<const c10::ValueError*>(&e) || dynamic_cast<const c10::IndexError*>(&e) ||
      dynamic_cast<const c10::TypeError*>(&e)) {
    return absl::InvalidArgumentError(msg);
  }
  return absl::InternalError(msg);
}

// Runs f(); returns its value (StatusOr<R>) or OkStatus for void, or the c10::Error as a Status.
template <typename F>
auto CatchTorch(std::string_view context, F&& f) {
  using R = std::invoke_result_t<F>;
  if constexpr (std::is_void_v<R>) {
    try {
      std::forward<F>(f)();
      return absl::OkStatus();
    } catch (const c10::Error& e) {
      return TorchErrorToStatus(e, context);
    }
  } else {
    try {
      return absl::StatusOr<R>(std::forward<F>(f)());
    } catch (const c10::Error& e) {
      return absl::StatusOr<R>(TorchErrorToStatus(e, context));
    }
  }
}

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_TORCH_STATUS_H_
