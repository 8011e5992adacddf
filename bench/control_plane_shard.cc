// AgentFleet::Shard's loop: its thread's timers and completion queue, the calls in flight,
// the counters and samples other threads read (control_plane_shard.h).
#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "bench/control_plane_shard.h"
#include "grpc/support/time.h"

namespace dhp::bench {

using fleet::Call;
using fleet::kMs;
using fleet::kStopWaitNs;
using fleet::NowNs;

void AgentFleet::Shard::AddAgent(const std::string& id) {
  SimAgent a;
  a.id = id;
  a.channel = static_cast<int>(agents_.size());  // modulo the channel count in Start
  agents_.push_back(std::move(a));
}

void AgentFleet::Shard::Start(std::vector<std::shared_ptr<grpc::Channel>> channels,
                              std::vector<std::shared_ptr<grpc::Channel>> heartbeats,
                              std::vector<worker::HeartbeatBatcher*> relays) {
  relays_ = std::move(relays);
  for (auto& ch : channels) stubs_.push_back(v1::WorkerService::NewStub(ch));
  for (auto& ch : heartbeats) hb_stubs_.push_back(v1::WorkerService::NewStub(ch));
  channels_ = std::move(channels);
  hb_channels_ = std::move(heartbeats);
  // Agents come up at random moments over start_spread_ms, as on a real cluster, so that
  // their heartbeats are spread over the interval rather than in one burst.
  std::uniform_int_distribution<int64_t> start(0, std::max(0, o_.start_spread_ms) * kMs);
  const int64_t now = NowNs();
  for (size_t i = 0; i < agents_.size(); ++i) {
    agents_[i].channel = static_cast<int>(i % stubs_.size());
    Arm(static_cast<uint32_t>(i), Kind::kRegister, now + start(rng_));
  }
  register_limit_ = std::max(1, o_.register_concurrency / std::max(1, o_.threads));
  if (o_.heartbeat_stream) {
    streams_ =
        std::make_unique<fleet::HeartbeatStreams>(cq_, agents_.size(), o_.heartbeat_deadline_ms);
  }
  thread_ = std::thread([this] { Run(); });
}

bool AgentFleet::Shard::Join() {
  if (thread_.joinable()) thread_.join();
  return !abandoned_;
}

void AgentFleet::Shard::AddCounters(FleetCounters* c) const {
  c->registered += registered_.load();
  c->registrations += registrations_.load();
  c->reregistrations += reregistrations_.load();
  c->register_failures += register_failures_.load();
  c->heartbeats_ok += hb_ok_.load();
  c->heartbeats_failed += hb_failed_.load();
  c->heartbeats_deadline += hb_deadline_.load();
  c->progress_ok += prog_ok_.load();
  c->progress_failed += prog_failed_.load();
  c->progress_stop += prog_stop_.load();
  c->ranks += ranks_.load();
  c->reporting_runs += reporting_.load();
  c->in_flight += in_flight_count_.load();
  c->streams_opened += streams_opened_.load();
  c->streams_open += streams_open_.load();
  c->stream_fallbacks += stream_fallbacks_.load();
  std::lock_guard<std::mutex> lock(mu_);
  if (c->first_error.empty()) c->first_error = first_error_;
}

void AgentFleet::Shard::TakeSamples(FleetSamples* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto append = [](std::vector<int64_t>& to, std::vector<int64_t>& from) {
    to.insert(to.end(), from.begin(), from.end());
    from.clear();
  };
  append(out->heartbeat_ns, samples_.heartbeat_ns);
  append(out->lag_ns, samples_.lag_ns);
  append(out->progress_ns, samples_.progress_ns);
  out->heartbeats_ok += samples_.heartbeats_ok;
  out->heartbeats_failed += samples_.heartbeats_failed;
  out->heartbeats_deadline += samples_.heartbeats_deadline;
  out->progress_ok += samples_.progress_ok;
  out->progress_failed += samples_.progress_failed;
  if (out->first_error.empty()) out->first_error = samples_.first_error;
  out->max_heartbeat_gap_ns = std::max(out->max_heartbeat_gap_ns, samples_.max_heartbeat_gap_ns);
  samples_ = FleetSamples();
}

void AgentFleet::Shard::Run() {
  bool stopping = false;
  int64_t stop_ns = 0;
  while (true) {
    if (stop_ && !stopping) {
      stopping = true;
      stop_ns = NowNs();
      for (Call* c : in_flight_) c->ctx.TryCancel();
      if (streams_ != nullptr) streams_->CancelAll();
      inbox_.Close();
    }
    if (stopping && in_flight_.empty() && (streams_ == nullptr || streams_->live() == 0) &&
        !inbox_.Pending()) {
      break;
    }
    if (stopping && NowNs() - stop_ns > kStopWaitNs) {
      DescribeStuckCalls();
      abandoned_ = true;
      return;
    }
    int64_t now = NowNs();
    if (!stopping) {
      for (int fired = 0; fired < 2000 && !timers_.empty() && timers_.top().due <= now; ++fired) {
        const Timer t = timers_.top();
        timers_.pop();
        Fire(t, NowNs());
      }
      PumpRegistrations();
      now = NowNs();
    }
    int64_t wait = 50 * kMs;
    if (!stopping && !timers_.empty())
      wait = std::clamp<int64_t>(timers_.top().due - now, 0, wait);
    const gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(wait, GPR_TIMESPAN));
    void* tag = nullptr;
    bool ok = false;
    grpc::CompletionQueue::NextStatus st = cq_.AsyncNext(&tag, &ok, deadline);
    // Drain what is ready (at most 512) before looking at the timers again; every event
    // taken from the queue is handled.
    for (int n = 0; st == grpc::CompletionQueue::GOT_EVENT; ++n) {
      Complete(static_cast<fleet::Tag*>(tag), ok, stopping);
      if (n == 511) break;
      st = cq_.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
    }
    if (!stopping && NowNs() >= next_scan_ns) ScanSilence();
  }
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
  }
}

void AgentFleet::Shard::Arm(uint32_t agent, Kind kind, int64_t due) {
  SimAgent& a = agents_[agent];
  (kind == Kind::kHeartbeat  ? a.hb_due
   : kind == Kind::kProgress ? a.progress_due
                             : a.register_due) = due;
  timers_.push(Timer{due, agent, kind});
}

void AgentFleet::Shard::Fire(const Timer& t, int64_t now) {
  SimAgent& a = agents_[t.agent];
  switch (t.kind) {
    case Kind::kRegister:
      if (a.register_due != t.due) return;  // superseded
      a.register_due = 0;
      to_register_.push_back(t.agent);
      return;
    case Kind::kHeartbeat:
      if (a.hb_due != t.due || !a.registered || a.hb_in_flight) return;
      a.hb_due = 0;
      SendHeartbeat(t.agent, t.due, now);
      return;
    case Kind::kProgress:
      if (a.progress_due != t.due) return;
      a.progress_due = 0;
      SendProgress(t.agent, now);
      return;
    case Kind::kStream:  // a heartbeat's deadline on its stream
      streams_->Expire(t.agent, t.due);
      return;
    case Kind::kWake:  // never a timer
      return;
  }
}

Call* AgentFleet::Shard::NewCall(Kind kind, uint32_t agent, int deadline_ms) {
  Call* c = new Call(kind);
  c->agent = agent;
  c->sent_ns = NowNs();
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  in_flight_.insert(c);
  CountInFlight();
  return c;
}

void AgentFleet::Shard::CountInFlight() {
  const bool s = streams_ != nullptr;
  in_flight_count_ =
      static_cast<int64_t>(in_flight_.size()) + (s ? streams_->beats_in_flight() : 0);
  streams_open_ = s ? static_cast<int64_t>(streams_->live()) : 0;
  streams_opened_ = s ? streams_->opened() : 0;
}

void AgentFleet::Shard::OnWake(bool stopping) {
  std::vector<RelayedBeat> beats = inbox_.Take();
  if (stopping) return;
  for (RelayedBeat& b : beats) {
    OnHeartbeat(b.agent, b.status, b.response, b.sent_ns, b.answered_ns);
  }
}

void AgentFleet::Shard::Complete(fleet::Tag* tag, bool ok, bool stopping) {
  const int64_t now = NowNs();
  if (tag->kind == Kind::kWake) {
    OnWake(stopping);
    return;
  }
  if (tag->kind == Kind::kStream) {
    fleet::StreamBeat beat;
    const bool over = streams_->Complete(*static_cast<fleet::StreamOp*>(tag), ok, now, &beat);
    CountInFlight();
    if (over && !stopping) OnStreamBeat(beat);
    return;
  }
  Call* c = static_cast<Call*>(tag);
  in_flight_.erase(c);
  CountInFlight();
  std::unique_ptr<Call> owned(c);
  if (stopping) return;
  switch (c->kind) {
    case Kind::kRegister:
      OnRegistered(c, now);
      break;
    case Kind::kHeartbeat:
      OnHeartbeat(c->agent, c->status, c->hb_resp, c->sent_ns, now);
      break;
    case Kind::kProgress:
      OnProgress(c, now);
      break;
    case Kind::kStream:
    case Kind::kWake:
      break;
  }
}

void AgentFleet::Shard::NoteGap(int64_t gap) {
  if (!recording_) return;
  std::lock_guard<std::mutex> lock(mu_);
  samples_.max_heartbeat_gap_ns = std::max(samples_.max_heartbeat_gap_ns, gap);
}

void AgentFleet::Shard::ScanSilence() {
  const int64_t now = NowNs();
  next_scan_ns = now + 1000 * kMs;
  int64_t longest = 0;
  for (const SimAgent& a : agents_) {
    if (a.registered && a.last_sent_ns > 0) longest = std::max(longest, now - a.last_sent_ns);
  }
  NoteGap(longest);
}

void AgentFleet::Shard::DescribeStuckCalls() {
  std::map<Kind, int> by_kind;
  int64_t oldest = 0;
  for (const Call* c : in_flight_) {
    ++by_kind[c->kind];
    oldest = std::max(oldest, NowNs() - c->sent_ns);
  }
  const std::string streams = streams_ != nullptr ? streams_->Describe(NowNs()) : "no streams";
  std::fprintf(stderr,
               "control_plane_fleet: %zu calls (register %d, heartbeat %d, progress %d; the "
               "oldest was sent %.1f s ago) and %s did not complete after cancellation; "
               "abandoning them\n",
               in_flight_.size(), by_kind[Kind::kRegister], by_kind[Kind::kHeartbeat],
               by_kind[Kind::kProgress], oldest / 1e9, streams.c_str());
}

void AgentFleet::Shard::NoteError(const std::string& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (first_error_.empty()) first_error_ = e;
}

}  // namespace dhp::bench
