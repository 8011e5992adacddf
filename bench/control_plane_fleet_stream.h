// Part of AgentFleet (bench/control_plane_fleet.h): the completion-queue tags of a fleet shard,
// and HeartbeatStreams, its agents' WorkerService.HeartbeatStream calls in heartbeat_stream mode.
//
// Every pending operation on a shard's CompletionQueue has its own tag, a Tag: a unary call
// (control_plane_fleet.cc's Call, one per RPC) or one operation of a stream (StreamOp: StartCall,
// Write, Read or Finish; a stream holds one of each, and each has at most one operation pending).
// The shard dispatches a completion by Tag::kind.
//
// HeartbeatStreams keeps at most one open stream per agent and drives it as worker/agent's
// HeartbeatStream does: the first heartbeat opens the stream (StartCall; the request is written
// once that completed, since gRPC's StartCall and Write share one operation set), each heartbeat
// writes its request and reads its answer (both pending at once, one heartbeat at a time). A
// heartbeat is over when both completed and the read was OK (the stream stays open for the
// next), or, when something failed (a read or write not OK, Expire's cancellation), once Finish
// has given the status that ended the stream: NOT_FOUND and the like as the controller ended it,
// DEADLINE_EXCEEDED after Expire. Such a stream is detached from its agent at once (the next
// heartbeat opens another) and deleted when its Finish completed.
//
// Thread-safety: not thread-safe; the shard's thread only.
#ifndef DHP_BENCH_CONTROL_PLANE_FLEET_STREAM_H_
#define DHP_BENCH_CONTROL_PLANE_FLEET_STREAM_H_

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace dhp::bench::fleet {

// What a completion-queue tag or a shard timer is about. Timers of kind kStream are heartbeat
// deadlines on a stream. kWake is the shard's alarm: the relays inside the generator
// (FleetOptions::in_process_relays) answered heartbeats.
enum class Kind : uint8_t { kRegister, kHeartbeat, kProgress, kStream, kWake };

// One pending completion-queue operation; its address is the tag.
struct Tag {
  explicit Tag(Kind k) : kind(k) {}
  Kind kind;
  uint32_t agent = 0;
};

enum class StreamOpKind : uint8_t { kStart, kWrite, kRead, kFinish };

struct Stream;  // one HeartbeatStream call (control_plane_fleet_stream.cc)

// One operation of a stream; the stream holds one of each kind.
struct StreamOp : Tag {
  StreamOp() : Tag(Kind::kStream) {}
  StreamOpKind op = StreamOpKind::kStart;
  Stream* stream = nullptr;
};

// A heartbeat on a stream that is over.
struct StreamBeat {
  uint32_t agent = 0;
  grpc::Status status;             // OK, or what ended the stream
  v1::HeartbeatResponse response;  // when OK
  int64_t sent_ns = 0;
  int64_t answered_ns = 0;  // the read's completion (OK), or when the failure was known
};

class HeartbeatStreams {
 public:
  HeartbeatStreams(grpc::CompletionQueue& cq, size_t agents, int deadline_ms);
  ~HeartbeatStreams();  // deletes what is left: only once the completion queue holds none of it
  HeartbeatStreams(const HeartbeatStreams&) = delete;
  HeartbeatStreams& operator=(const HeartbeatStreams&) = delete;

  // Sends `req` (sent at `now`) on `agent`'s stream, opening one on `stub` when it has none.
  // Returns the heartbeat's deadline: the caller calls Expire(agent, it) then.
  int64_t Send(uint32_t agent, v1::WorkerService::Stub& stub, const v1::HeartbeatRequest& req,
               int64_t now);
  // The heartbeat whose deadline was `deadline_ns` has had no answer: cancels its stream, and the
  // heartbeat ends DEADLINE_EXCEEDED. Nothing when that heartbeat is already over.
  void Expire(uint32_t agent, int64_t deadline_ns);
  // Handles the completion of `op` (`ok` as the queue gave it); true, with *beat filled, when it
  // ended a heartbeat.
  bool Complete(const StreamOp& op, bool ok, int64_t now, StreamBeat* beat);
  // Cancels every stream (Stop); each ends as its operations complete through Complete.
  void CancelAll();

  size_t live() const { return live_.size(); }  // streams not yet finished
  int64_t opened() const { return opened_; }    // streams opened so far
  int beats_in_flight() const { return beats_in_flight_; }
  // The live streams' pending operations by kind and the oldest stream's age, for a message.
  std::string Describe(int64_t now) const;

 private:
  void Issue(Stream* s);        // writes the request and reads the answer
  void Break(Stream* s);        // no more heartbeats on it: detached from its agent
  void StartFinish(Stream* s);  // once nothing else is pending on a broken stream
  bool Finished(Stream* s, int64_t now, StreamBeat* beat);

  grpc::CompletionQueue& cq_;
  const int64_t deadline_ns_;
  std::vector<Stream*> by_agent_;     // each agent's open stream, or nullptr
  std::unordered_set<Stream*> live_;  // owned: opened and not yet finished
  int64_t opened_ = 0;
  int beats_in_flight_ = 0;
};

}  // namespace dhp::bench::fleet

#endif  // DHP_BENCH_CONTROL_PLANE_FLEET_STREAM_H_
