#include "common/mutex_mode.h"

#include "absl/synchronization/mutex.h"

namespace dhp {

void SkipMutexOrderChecks() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace dhp
