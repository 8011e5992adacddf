// What AgentFleet::Shard's simulated agents send and what they do with the answers:
// registration, heartbeats (unary, on a stream, or through an in-process relay) and progress
// reports (control_plane_shard.h).
#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "bench/control_plane_shard.h"

namespace dhp::bench {

using fleet::Call;
using fleet::kMs;
using fleet::NowNs;

void AgentFleet::Shard::PumpRegistrations() {
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

void AgentFleet::Shard::OnRegistered(Call* c, int64_t now) {
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

void AgentFleet::Shard::SendHeartbeat(uint32_t i, int64_t due, int64_t now) {
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

void AgentFleet::Shard::OnStreamBeat(const fleet::StreamBeat& b) {
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

void AgentFleet::Shard::OnHeartbeat(uint32_t i, const grpc::Status& status,
                                    const v1::HeartbeatResponse& resp, int64_t sent_ns,
                                    int64_t now) {
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

void AgentFleet::Shard::Reconcile(uint32_t i, const v1::HeartbeatResponse& resp, int64_t now) {
  SimAgent& a = agents_[i];
  if (ApplyHeartbeatResponse(a, resp, &next_pid_, o_.every_rank_reports) &&
      a.progress_due == 0) {
    std::uniform_int_distribution<int64_t> jitter(0, 500 * kMs);
    Arm(i, Kind::kProgress, now + jitter(rng_));
  }
}

void AgentFleet::Shard::Recount(SimAgent& a) {
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

void AgentFleet::Shard::SendProgress(uint32_t i, int64_t now) {
  SimAgent& a = agents_[i];
  bool any = false;
  for (SimRank& r : a.ranks) {
    if (!r.Reporting()) continue;
    any = true;
    if (o_.relay_progress) {  // to the agent: its next heartbeat carries the newest
      FillProgressRequest(r, o_.progress_interval_ms, o_.rank_metrics, &r.pending);
      r.relay_pending = true;
      continue;
    }
    if (r.progress_in_flight) continue;
    Call* c = NewCall(Kind::kProgress, i, o_.rpc_deadline_ms);
    c->job_id = r.job_id;
    c->attempt = r.attempt;
    c->world_rank = r.world_rank;
    FillProgressRequest(r, o_.progress_interval_ms, o_.rank_metrics, &c->prog_req);
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

void AgentFleet::Shard::OnProgress(Call* c, int64_t now) {
  CountProgress(c->agent, c->job_id, c->attempt, c->world_rank, c->status, c->prog_resp,
                now - c->sent_ns);
}

void AgentFleet::Shard::OnRelayedAnswers(uint32_t i, const v1::HeartbeatResponse& resp,
                                         int64_t latency_ns) {
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

void AgentFleet::Shard::CountProgress(uint32_t i, const std::string& job_id, int32_t attempt,
                                      int32_t world_rank, const grpc::Status& status,
                                      const v1::ReportProgressResponse& resp, int64_t latency_ns) {
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

}  // namespace dhp::bench
