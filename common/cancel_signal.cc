#include "common/cancel_signal.h"

#include <utility>

namespace dhp {

void CancelSignal::Cancel() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (cancelled_) return;
  cancelled_ = true;
  std::function<void()> handler = std::move(handler_);
  handler_ = nullptr;
  if (handler) handler();
}

void CancelSignal::OnCancel(std::function<void()> handler) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (detached_) return;
  if (cancelled_) {
    handler();
    return;
  }
  handler_ = std::move(handler);
}

void CancelSignal::Detach() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  detached_ = true;
  handler_ = nullptr;
}

bool CancelSignal::cancelled() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return cancelled_;
}

}  // namespace dhp
