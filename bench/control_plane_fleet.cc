#include "bench/control_plane_fleet.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <random>
#include <thread>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "api/client.h"
#include "bench/control_plane_fleet_stream.h"
#include "bench/control_plane_relay_inbox.h"
#include "bench/control_plane_sim_agent.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpc/support/time.h"
#include "grpcpp/grpcpp.h"
#include "worker/relay/heartbeat_batcher.h"

namespace dhp::bench {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr int64_t kMs = 1000000;
constexpr int64_t kStopWaitNs = 30000 * kMs;  // for cancelled calls to complete

using fleet::Kind;
using fleet::RelayedBeat;

// One unary RPC in flight; its address is the completion-queue tag.
struct Call : fleet::Tag {
  explicit Call(Kind k) : Tag(k) {}
  int64_t due_ns = 0, sent_ns = 0;
  std::string job_id;  // progress
  int32_t attempt = 0;
  int32_t world_rank = 0;
  grpc::ClientContext ctx;
  grpc::Status status;
  v1::RegisterNodeRequest reg_req;
  v1::RegisterNodeResponse reg_resp;
  v1::HeartbeatRequest hb_req;
  v1::HeartbeatResponse hb_resp;
  v1::ReportProgressRequest prog_req;
  v1::ReportProgressResponse prog_resp;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::RegisterNodeResponse>> reg_reader;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::HeartbeatResponse>> hb_reader;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReportProgressResponse>> prog_reader;
};

struct Timer {
  int64_t due;
  uint32_t agent;
  Kind kind;
  bool operator>(const Timer& o) const { return due > o.due; }
};

}  // namespace

class AgentFleet::Shard {
 public:
  Shard(const FleetOptions& o, int index, std::atomic<bool>& recording)
      : o_(o), recording_(recording), rng_(12345 + index) {}

  void AddAgent(const std::string& id) {
    SimAgent a;
    a.id = id;
    a.channel = static_cast<int>(agents_.size());  // modulo the channel count in Start
    agents_.push_back(std::move(a));
  }

  // `heartbeats`: the channels the agents' unary heartbeats go on (empty: `channels`);
  // `relays`: the in-process relays they go to instead (empty: none).
  void Start(std::vector<std::shared_ptr<grpc::Channel>> channels,
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

  void RequestStop() { stop_ = true; }
  // Joins the thread; false when it had to abandon calls that never completed (then the
  // completion queue must not be destroyed: the caller leaks the shard).
  bool Join() {
    if (thread_.joinable()) thread_.join();
    return !abandoned_;
  }

  int64_t registered() const { return registered_.load(); }

  void AddCounters(FleetCounters* c) const {
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

  void TakeSamples(FleetSamples* out) {
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

 private:
  // ---- the loop ------------------------------------------------------------------------------

  void Run() {
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

  void Arm(uint32_t agent, Kind kind, int64_t due) {
    SimAgent& a = agents_[agent];
    (kind == Kind::kHeartbeat  ? a.hb_due
     : kind == Kind::kProgress ? a.progress_due
                               : a.register_due) = due;
    timers_.push(Timer{due, agent, kind});
  }

  void Fire(const Timer& t, int64_t now) {
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

  Call* NewCall(Kind kind, uint32_t agent, int deadline_ms) {
    Call* c = new Call(kind);
    c->agent = agent;
    c->sent_ns = NowNs();
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    in_flight_.insert(c);
    CountInFlight();
    return c;
  }

  // The gauges of calls (heartbeats on streams included) and streams.
  void CountInFlight() {
    const bool s = streams_ != nullptr;
    in_flight_count_ =
        static_cast<int64_t>(in_flight_.size()) + (s ? streams_->beats_in_flight() : 0);
    streams_open_ = s ? static_cast<int64_t>(streams_->live()) : 0;
    streams_opened_ = s ? streams_->opened() : 0;
  }

  // ---- registration ----------------------------------------------------------------------------

  void PumpRegistrations() {
    while (registering_ < register_limit_ && !to_register_.empty()) {
      const uint32_t i = to_register_.front();
      to_register_.pop_front();
      SimAgent& a = agents_[i];
      Call* c = NewCall(Kind::kRegister, i, o_.rpc_deadline_ms);
      FillRegisterRequest(a, o_.gpus_per_node, o_.gpu_memory_bytes, &c->reg_req);
      c->reg_reader = stubs_[a.channel]->PrepareAsyncRegisterNode(&c->ctx, c->reg_req, &cq_);
      c->reg_reader->StartCall();
      c->reg_reader->Finish(&c->reg_resp, &c->status, c);
      ++registering_;
    }
  }

  void OnRegistered(Call* c, int64_t now) {
    --registering_;
    SimAgent& a = agents_[c->agent];
    if (!c->status.ok()) {
      ++register_failures_;
      NoteError("RegisterNode " + a.id + ": " + c->status.error_message());
      Arm(c->agent, Kind::kRegister, now + a.backoff_ms * kMs);
      a.backoff_ms = std::min(a.backoff_ms * 2, 5000);
      return;
    }
    a.backoff_ms = 200;
    a.registered = true;
    ++registered_;
    ++registrations_;
    a.hb_interval_ns = std::max(100, c->reg_resp.heartbeat_interval_ms()) * kMs;
    Arm(c->agent, Kind::kHeartbeat, now);  // as dhp-worker: the first heartbeat at once
  }

  // ---- heartbeats ------------------------------------------------------------------------------

  // On the agent's HeartbeatStream in heartbeat_stream mode (unless the controller has none),
  // else a unary Heartbeat.
  void SendHeartbeat(uint32_t i, int64_t due, int64_t now) {
    SimAgent& a = agents_[i];
    a.hb_in_flight = true;
    if (a.last_sent_ns > 0) NoteGap(now - a.last_sent_ns);
    a.last_sent_ns = now;
    if (streams_ != nullptr && !a.stream_unimplemented) {
      v1::HeartbeatRequest req;
      FillHeartbeatRequest(a, &req);
      const int64_t deadline = streams_->Send(i, *stubs_[a.channel], req, NowNs());
      timers_.push(Timer{deadline, i, Kind::kStream});
      CountInFlight();
    } else if (!relays_.empty()) {
      v1::HeartbeatRequest req;
      FillHeartbeatRequest(a, &req);
      relays_[i % relays_.size()]->Submit(
          "", std::move(req),
          [this, i, sent = NowNs()](const absl::Status& s, v1::HeartbeatResponse resp) {
            inbox_.Put(RelayedBeat{i, grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                                                std::string(s.message())),
                                std::move(resp), sent, NowNs()});
          });
    } else {
      Call* c = NewCall(Kind::kHeartbeat, i, o_.heartbeat_deadline_ms);
      c->due_ns = due;
      FillHeartbeatRequest(a, &c->hb_req);
      v1::WorkerService::Stub* stub =
          hb_stubs_.empty() ? stubs_[a.channel].get()
                            : hb_stubs_[i % hb_stubs_.size()].get();
      c->hb_reader = stub->PrepareAsyncHeartbeat(&c->ctx, c->hb_req, &cq_);
      c->hb_reader->StartCall();
      c->hb_reader->Finish(&c->hb_resp, &c->status, c);
    }
    if (recording_) {
      std::lock_guard<std::mutex> lock(mu_);
      samples_.lag_ns.push_back(std::max<int64_t>(0, now - due));
    }
  }

  // A heartbeat on a stream is over (fleet::HeartbeatStreams).
  void OnStreamBeat(const fleet::StreamBeat& b) {
    SimAgent& a = agents_[b.agent];
    if (b.status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      // A controller without HeartbeatStream: as dhp-worker, this and later heartbeats go unary.
      a.stream_unimplemented = true;
      ++stream_fallbacks_;
      NoteError("HeartbeatStream " + a.id + ": " + b.status.error_message() +
                " (falling back to unary Heartbeat)");
      a.hb_in_flight = false;
      Arm(b.agent, Kind::kHeartbeat, NowNs());
      return;
    }
    OnHeartbeat(b.agent, b.status, b.response, b.sent_ns, b.answered_ns);
  }

  // A heartbeat sent at `sent_ns` (unary or on a stream) answered at `now` with `status` and,
  // when OK, `resp`.
  void OnHeartbeat(uint32_t i, const grpc::Status& status, const v1::HeartbeatResponse& resp,
                   int64_t sent_ns, int64_t now) {
    SimAgent& a = agents_[i];
    a.hb_in_flight = false;
    const grpc::StatusCode code = status.error_code();
    const bool deadline = code == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (status.ok()) {
      ++hb_ok_;
    } else {
      ++(deadline ? hb_deadline_ : hb_failed_);
      if (!deadline) NoteError("Heartbeat " + a.id + ": " + status.error_message());
    }
    if (recording_) {
      std::lock_guard<std::mutex> lock(mu_);
      if (status.ok() || deadline) samples_.heartbeat_ns.push_back(now - sent_ns);
      if (status.ok())
        ++samples_.heartbeats_ok;
      else
        ++(deadline ? samples_.heartbeats_deadline : samples_.heartbeats_failed);
      if (!status.ok() && !deadline && samples_.first_error.empty()) {
        samples_.first_error = "Heartbeat: " + status.error_message();
      }
    }
    if (code == grpc::StatusCode::NOT_FOUND) {  // the controller forgot the node
      a.registered = false;
      --registered_;
      ++reregistrations_;
      to_register_.push_back(i);
      return;
    }
    if (status.ok()) {
      OnRelayedAnswers(i, resp, now - sent_ns);
      Reconcile(i, resp, now);
    } else {
      a.relayed.clear();  // lost with the heartbeat: the ranks' next reports are newer
      HeartbeatFailed(a);  // the exits it carried go again
    }
    Recount(a);
    Arm(i, Kind::kHeartbeat, now + a.hb_interval_ns);
  }

  // What the response wants (like RankLauncher::Reconcile, without processes); the first
  // progress report soon after a run's rank 0 is known RUNNING (STARTING -> RUNNING).
  void Reconcile(uint32_t i, const v1::HeartbeatResponse& resp, int64_t now) {
    SimAgent& a = agents_[i];
    if (ApplyHeartbeatResponse(a, resp, &next_pid_, o_.every_rank_reports) &&
        a.progress_due == 0) {
      std::uniform_int_distribution<int64_t> jitter(0, 500 * kMs);
      Arm(i, Kind::kProgress, now + jitter(rng_));
    }
  }

  // Keeps the fleet's gauges (ranks run, runs reporting) in step with agent `a`.
  void Recount(SimAgent& a) {
    int ranks = 0, reporting = 0;
    for (const SimRank& r : a.ranks) {
      ranks += r.wanted;
      reporting += r.Reporting();
    }
    ranks_ += ranks - a.counted_ranks;
    reporting_ += reporting - a.counted_reporting;
    a.counted_ranks = ranks;
    a.counted_reporting = reporting;
  }

  // ---- progress --------------------------------------------------------------------------------

  void SendProgress(uint32_t i, int64_t now) {
    SimAgent& a = agents_[i];
    bool any = false;
    for (SimRank& r : a.ranks) {
      if (!r.Reporting()) continue;
      any = true;
      if (o_.relay_progress) {  // to the agent: its next heartbeat carries the newest
        FillProgressRequest(r, o_.progress_interval_ms, &r.pending);
        r.relay_pending = true;
        continue;
      }
      if (r.progress_in_flight) continue;
      Call* c = NewCall(Kind::kProgress, i, o_.rpc_deadline_ms);
      c->job_id = r.job_id;
      c->attempt = r.attempt;
      c->world_rank = r.world_rank;
      FillProgressRequest(r, o_.progress_interval_ms, &c->prog_req);
      r.progress_in_flight = true;
      c->prog_reader = stubs_[a.channel]->PrepareAsyncReportProgress(&c->ctx, c->prog_req, &cq_);
      c->prog_reader->StartCall();
      c->prog_reader->Finish(&c->prog_resp, &c->status, c);
    }
    if (any) {
      Arm(i, Kind::kProgress,
          now + std::max(int64_t{o_.progress_interval_ms} * kMs, a.progress_pace_ns));
    }
  }

  void OnProgress(Call* c, int64_t now) {
    CountProgress(c->agent, c->job_id, c->attempt, c->world_rank, c->status, c->prog_resp,
                  now - c->sent_ns);
  }

  // The reports the answered heartbeat relayed (relay_progress): each answer as a call's. A
  // controller that answered fewer than it was sent counts the rest as UNIMPLEMENTED.
  void OnRelayedAnswers(uint32_t i, const v1::HeartbeatResponse& resp, int64_t latency_ns) {
    SimAgent& a = agents_[i];
    const std::vector<std::tuple<std::string, int32_t, int32_t>> relayed = std::move(a.relayed);
    a.relayed.clear();
    for (size_t k = 0; k < relayed.size(); ++k) {
      const auto& [job_id, attempt, rank] = relayed[k];
      grpc::Status status(grpc::StatusCode::UNIMPLEMENTED, "no answer to a relayed report");
      v1::ReportProgressResponse answer;
      if (static_cast<int>(k) < resp.progress_size()) {
        const v1::ProgressAnswer& p = resp.progress(static_cast<int>(k));
        status = grpc::Status(static_cast<grpc::StatusCode>(p.code()), p.message());
        answer = p.response();
      }
      CountProgress(i, job_id, attempt, rank, status, answer, latency_ns);
    }
  }

  // One progress report answered (a call, or relayed in a heartbeat).
  void CountProgress(uint32_t i, const std::string& job_id, int32_t attempt, int32_t world_rank,
                     const grpc::Status& status, const v1::ReportProgressResponse& resp,
                     int64_t latency_ns) {
    SimAgent& a = agents_[i];
    SimRank* rank = FindRank(a, job_id, attempt, world_rank);
    const grpc::StatusCode code = status.error_code();
    if (status.ok()) {
      ++prog_ok_;
      if (resp.stop()) ++prog_stop_;
      a.progress_pace_ns = int64_t{std::max(0, resp.next_report_ms())} * kMs;
    } else {
      ++prog_failed_;
      NoteError("ReportProgress " + job_id + ": " + status.error_message());
    }
    if (recording_) {
      std::lock_guard<std::mutex> lock(mu_);
      if (status.ok()) {
        ++samples_.progress_ok;
        samples_.progress_ns.push_back(latency_ns);
      } else {
        ++samples_.progress_failed;
      }
    }
    if (rank == nullptr) return;
    rank->progress_in_flight = false;
    if ((status.ok() && resp.stop()) || code == grpc::StatusCode::FAILED_PRECONDITION ||
        code == grpc::StatusCode::NOT_FOUND) {
      rank->stopped = true;  // as a rank would: stop stepping
      Recount(a);
    }
  }

  // ---- in-process relays ----------------------------------------------------------------------

  // The inbox's alarm came back: handle what the relays answered since it was set.
  void OnWake(bool stopping) {
    std::vector<RelayedBeat> beats = inbox_.Take();
    if (stopping) return;
    for (RelayedBeat& b : beats) {
      OnHeartbeat(b.agent, b.status, b.response, b.sent_ns, b.answered_ns);
    }
  }

  // ---- completions -----------------------------------------------------------------------------

  // `ok` matters to stream operations only (a unary call's Finish always completes OK).
  void Complete(fleet::Tag* tag, bool ok, bool stopping) {
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

  // The longest time an agent went without sending a heartbeat, while recording: checked on
  // every send and, for agents that stopped sending altogether, by a scan every second.
  void NoteGap(int64_t gap) {
    if (!recording_) return;
    std::lock_guard<std::mutex> lock(mu_);
    samples_.max_heartbeat_gap_ns = std::max(samples_.max_heartbeat_gap_ns, gap);
  }
  void ScanSilence() {
    const int64_t now = NowNs();
    next_scan_ns = now + 1000 * kMs;
    int64_t longest = 0;
    for (const SimAgent& a : agents_) {
      if (a.registered && a.last_sent_ns > 0) longest = std::max(longest, now - a.last_sent_ns);
    }
    NoteGap(longest);
  }

  // Cancelled calls and streams should complete at once; report those that did not in
  // kStopWaitNs.
  void DescribeStuckCalls() {
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

  void NoteError(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.empty()) first_error_ = e;
  }

  const FleetOptions& o_;
  std::atomic<bool>& recording_;
  std::atomic<bool> stop_{false};
  bool abandoned_ = false;  // written by the thread before it ends, read after Join
  std::thread thread_;
  grpc::CompletionQueue cq_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs_;
  std::vector<std::shared_ptr<grpc::Channel>> hb_channels_;  // to relays (empty: none)
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> hb_stubs_;
  // heartbeat_stream: the agents' streams; declared after cq_, so destroyed before it.
  std::unique_ptr<fleet::HeartbeatStreams> streams_;
  std::vector<worker::HeartbeatBatcher*> relays_;  // in-process relays (empty: none)
  // Their answers, from their sender threads (declared after cq_, so destroyed before it).
  fleet::Tag wake_tag_{Kind::kWake};
  fleet::RelayInbox inbox_{&cq_, &wake_tag_};

  // Owned by the shard's thread.
  std::vector<SimAgent> agents_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::deque<uint32_t> to_register_;
  int registering_ = 0, register_limit_ = 1;
  std::unordered_set<Call*> in_flight_;
  std::mt19937_64 rng_;
  int64_t next_pid_ = 0;
  int64_t next_scan_ns = 0;

  // Read by other threads.
  std::atomic<int64_t> registered_{0}, registrations_{0}, reregistrations_{0},
      register_failures_{0}, hb_ok_{0}, hb_failed_{0}, hb_deadline_{0}, prog_ok_{0},
      prog_failed_{0}, prog_stop_{0}, ranks_{0}, reporting_{0}, in_flight_count_{0},
      streams_opened_{0}, streams_open_{0}, stream_fallbacks_{0};
  mutable std::mutex mu_;  // guards samples_ and first_error_
  FleetSamples samples_;
  std::string first_error_;
};

AgentFleet::AgentFleet(FleetOptions options) : options_(std::move(options)) {
  const int threads = std::max(1, options_.threads);
  for (int s = 0; s < threads; ++s) {
    shards_.push_back(std::make_unique<Shard>(options_, s, recording_));
  }
  for (int n = 0; n < options_.nodes; ++n) {
    char id[64];
    std::snprintf(id, sizeof id, "%s%05d", options_.node_prefix.c_str(), n);
    shards_[n % threads]->AddAgent(id);
  }
}

AgentFleet::~AgentFleet() { Stop(); }

void AgentFleet::Start() {
  if (started_) return;
  started_ = true;
  const int shards = static_cast<int>(shards_.size());
  const bool relayed = !options_.heartbeat_targets.empty() || options_.in_process_relays > 0;
  const int to_controller =
      relayed && options_.controller_channels > 0 ? options_.controller_channels : options_.channels;
  auto connect = [&](const std::string& target) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own HTTP/2 connection
    args.SetMaxReceiveMessageSize(64 << 20);
    for (const auto& [name, value] : options_.channel_args) args.SetInt(name, value);
    auto ch = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ch;
  };
  std::vector<worker::HeartbeatBatcher*> relays;
  worker::HeartbeatBatcherOptions batching;
  batching.window_ms = options_.relay_window_ms;
  for (int i = 0; i < options_.in_process_relays; ++i) {
    // As dhp-relay: its own connection, and a HeartbeatBatch deadline of 4 s.
    relay_clients_.push_back(std::make_unique<api::DhpClient>(options_.target, 4000));
    relays_.push_back(std::make_unique<worker::HeartbeatBatcher>(*relay_clients_.back(), batching));
    relays.push_back(relays_.back().get());
  }
  int relay_next = 0;
  for (auto& shard : shards_) {
    std::vector<std::shared_ptr<grpc::Channel>> channels, heartbeats;
    for (int i = 0; i < std::max(1, to_controller / shards); ++i) {
      channels.push_back(connect(options_.target));
    }
    const int to_relays =
        options_.heartbeat_targets.empty() ? 0 : std::max(1, options_.channels / shards);
    for (int i = 0; i < to_relays; ++i) {
      const std::string& relay = options_.heartbeat_targets[relay_next++ %
                                                            options_.heartbeat_targets.size()];
      heartbeats.push_back(connect(relay));
    }
    shard->Start(std::move(channels), std::move(heartbeats), relays);
  }
}

void AgentFleet::Stop() {
  for (auto& shard : shards_) {
    if (shard != nullptr) shard->RequestStop();
  }
  for (auto& shard : shards_) {
    if (shard != nullptr && !shard->Join()) {
      (void)shard.release();  // its completion queue still holds calls: never destroy it
    }
  }
  relays_.clear();  // sends what they hold; the shards drop the answers
  relay_clients_.clear();
}

int64_t AgentFleet::Registered() const {
  int64_t n = 0;
  for (const auto& shard : shards_) n += shard != nullptr ? shard->registered() : 0;
  return n;
}

FleetCounters AgentFleet::Counters() const {
  FleetCounters c;
  for (const auto& shard : shards_) {
    if (shard != nullptr) shard->AddCounters(&c);
  }
  return c;
}

void AgentFleet::SetRecording(bool on) { recording_ = on; }

FleetSamples AgentFleet::TakeSamples() {
  FleetSamples out;
  for (auto& shard : shards_) {
    if (shard != nullptr) shard->TakeSamples(&out);
  }
  return out;
}

}  // namespace dhp::bench
