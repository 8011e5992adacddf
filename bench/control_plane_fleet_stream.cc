#include "bench/control_plane_fleet_stream.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace dhp::bench::fleet {

constexpr int64_t kMs = 1000000;

struct Stream {
  explicit Stream(uint32_t agent) {
    for (StreamOp* op : {&start, &write, &read, &finish}) {
      op->agent = agent;
      op->stream = this;
    }
    start.op = StreamOpKind::kStart;
    write.op = StreamOpKind::kWrite;
    read.op = StreamOpKind::kRead;
    finish.op = StreamOpKind::kFinish;
  }
  uint32_t agent() const { return start.agent; }

  StreamOp start, write, read, finish;  // the tags
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::HeartbeatRequest, v1::HeartbeatResponse>> rw;
  v1::HeartbeatRequest req;
  v1::HeartbeatResponse resp;
  grpc::Status status;     // Finish's
  int pending = 0;         // StartCall, Write and Read operations pending
  bool started = false;    // StartCall completed OK
  bool broken = false;     // no more heartbeats: Finish once nothing else is pending
  bool finishing = false;  // Finish called
  bool expired = false;    // cancelled at the heartbeat's deadline
  // The heartbeat in flight: written (or waiting for StartCall) and not yet over.
  bool beat = false;
  bool read_done = false, read_ok = false;
  int64_t opened_ns = 0, sent_ns = 0, deadline_ns = 0, answered_ns = 0;
};

HeartbeatStreams::HeartbeatStreams(grpc::CompletionQueue& cq, size_t agents, int deadline_ms)
    : cq_(cq), deadline_ns_(int64_t{deadline_ms} * kMs), by_agent_(agents, nullptr) {}

HeartbeatStreams::~HeartbeatStreams() {
  for (Stream* s : live_) delete s;
}

int64_t HeartbeatStreams::Send(uint32_t agent, v1::WorkerService::Stub& stub,
                               const v1::HeartbeatRequest& req, int64_t now) {
  Stream* s = by_agent_[agent];
  if (s != nullptr && (s->pending > 0 || s->beat)) {
    // The previous heartbeat is not over (the fleet sends one at a time, so this does not
    // happen): that stream is dropped, its heartbeat never reported.
    if (s->beat) --beats_in_flight_;
    s->beat = false;
    Break(s);
    s->ctx.TryCancel();
    if (s->pending == 0 && !s->finishing) StartFinish(s);
    s = nullptr;
  }
  if (s == nullptr) {
    s = new Stream(agent);
    live_.insert(s);
    by_agent_[agent] = s;
    ++opened_;
    s->opened_ns = now;
    s->rw = stub.PrepareAsyncHeartbeatStream(&s->ctx, &cq_);
    s->rw->StartCall(&s->start);
    ++s->pending;
  }
  s->req = req;
  s->beat = true;
  s->read_done = s->read_ok = s->expired = false;
  s->sent_ns = now;
  s->deadline_ns = now + deadline_ns_;
  ++beats_in_flight_;
  if (s->started) Issue(s);  // else once StartCall completed
  return s->deadline_ns;
}

void HeartbeatStreams::Issue(Stream* s) {
  s->rw->Write(s->req, &s->write);
  s->rw->Read(&s->resp, &s->read);
  s->pending += 2;
}

void HeartbeatStreams::Expire(uint32_t agent, int64_t deadline_ns) {
  Stream* s = by_agent_[agent];
  if (s == nullptr || !s->beat || s->read_done || s->deadline_ns != deadline_ns) return;
  s->expired = true;
  Break(s);
  s->ctx.TryCancel();  // the pending operations complete not OK, then Finish
}

void HeartbeatStreams::Break(Stream* s) {
  s->broken = true;
  if (by_agent_[s->agent()] == s) by_agent_[s->agent()] = nullptr;
}

void HeartbeatStreams::StartFinish(Stream* s) {
  s->finishing = true;
  s->rw->Finish(&s->status, &s->finish);
}

void HeartbeatStreams::CancelAll() {
  for (Stream* s : live_) {
    Break(s);
    s->ctx.TryCancel();
    if (s->pending == 0 && !s->finishing) StartFinish(s);
  }
}

bool HeartbeatStreams::Complete(const StreamOp& op, bool ok, int64_t now, StreamBeat* beat) {
  Stream* s = op.stream;
  switch (op.op) {
    case StreamOpKind::kStart:
      --s->pending;
      s->started = ok;
      if (!ok) {
        Break(s);
      } else if (s->beat && !s->broken) {
        Issue(s);
      }
      break;
    case StreamOpKind::kWrite:
      --s->pending;
      if (!ok) Break(s);  // the read fails too
      break;
    case StreamOpKind::kRead:
      --s->pending;
      s->read_done = true;
      s->read_ok = ok;
      s->answered_ns = now;
      if (!ok) Break(s);  // the controller ended the stream, or it was cancelled
      break;
    case StreamOpKind::kFinish:
      return Finished(s, now, beat);
  }
  if (s->pending > 0) return false;
  bool answered = false;
  if (s->beat && s->read_ok) {  // the write and the read completed: the heartbeat is over
    s->beat = false;
    --beats_in_flight_;
    beat->agent = s->agent();
    beat->status = grpc::Status::OK;
    beat->response.Swap(&s->resp);
    beat->sent_ns = s->sent_ns;
    beat->answered_ns = s->answered_ns;
    answered = true;
  }
  if (s->broken && !s->finishing) StartFinish(s);
  return answered;
}

bool HeartbeatStreams::Finished(Stream* s, int64_t now, StreamBeat* beat) {
  std::unique_ptr<Stream> owned(s);
  live_.erase(s);
  if (by_agent_[s->agent()] == s) by_agent_[s->agent()] = nullptr;
  if (!s->beat) return false;
  --beats_in_flight_;
  beat->agent = s->agent();
  beat->sent_ns = s->sent_ns;
  beat->answered_ns = now;
  beat->response.Clear();
  if (s->expired) {
    beat->status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                "HeartbeatStream: no answer within the heartbeat deadline");
  } else if (s->status.ok()) {  // the controller ended the stream OK without answering
    beat->status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "HeartbeatStream ended OK before answering a heartbeat");
  } else {
    beat->status = s->status;
  }
  return true;
}

std::string HeartbeatStreams::Describe(int64_t now) const {
  int start = 0, io = 0, finishing = 0;
  int64_t oldest = 0;
  for (const Stream* s : live_) {
    if (s->finishing) {
      ++finishing;
    } else if (!s->started && s->pending > 0) {
      ++start;
    } else if (s->pending > 0) {
      ++io;
    }
    oldest = std::max(oldest, now - s->opened_ns);
  }
  char text[200];
  std::snprintf(text, sizeof text,
                "%zu heartbeat streams (starting %d, writing/reading %d, finishing %d; the oldest "
                "opened %.1f s ago)",
                live_.size(), start, io, finishing, oldest / 1e9);
  return text;
}

}  // namespace dhp::bench::fleet
