// RelayInbox: heartbeats answered by the relays inside the generator (FleetOptions::
// in_process_relays), handed from their sender threads to a fleet shard's thread.
//
// Put (any thread) queues an answer and wakes the shard's completion queue with a grpc::Alarm,
// set at most once at a time as grpc::Alarm requires; the alarm's tag is `tag`. When that tag
// comes back, the shard calls Take for what came meanwhile. Close drops every later Put and
// cancels a pending alarm (its tag still comes back); the shard waits while Pending() before
// it shuts its queue down. Thread-safe.
#ifndef DHP_BENCH_CONTROL_PLANE_RELAY_INBOX_H_
#define DHP_BENCH_CONTROL_PLANE_RELAY_INBOX_H_

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "dhp/v1/service.pb.h"
#include "grpc/support/time.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"

namespace dhp::bench::fleet {

struct RelayedBeat {
  uint32_t agent = 0;
  grpc::Status status;
  v1::HeartbeatResponse response;
  int64_t sent_ns = 0, answered_ns = 0;
};

class RelayInbox {
 public:
  // `cq` and `tag` must outlive the inbox's pending alarm.
  RelayInbox(grpc::CompletionQueue* cq, void* tag) : cq_(cq), tag_(tag) {}

  void Put(RelayedBeat beat) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return;
    beats_.push_back(std::move(beat));
    if (!wake_pending_) {
      wake_pending_ = true;
      wake_.Set(cq_, gpr_time_0(GPR_CLOCK_MONOTONIC), tag_);
    }
  }
  // The alarm's tag came back: what was put since it was set.
  std::vector<RelayedBeat> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    wake_pending_ = false;
    return std::exchange(beats_, {});
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
    if (wake_pending_) wake_.Cancel();
  }
  bool Pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return wake_pending_;
  }

 private:
  grpc::CompletionQueue* const cq_;
  void* const tag_;
  std::mutex mu_;
  std::vector<RelayedBeat> beats_;  // guarded by mu_, as the two flags
  bool open_ = true, wake_pending_ = false;
  grpc::Alarm wake_;
};

}  // namespace dhp::bench::fleet

#endif  // DHP_BENCH_CONTROL_PLANE_RELAY_INBOX_H_
