#include "bench/control_plane_sim_agent.h"

#include <algorithm>

namespace dhp::bench {

void FillRegisterRequest(const SimAgent& a, int gpus, int64_t gpu_memory_bytes,
                         v1::RegisterNodeRequest* req) {
  v1::Node* node = req->mutable_node();
  node->set_id(a.id);
  node->set_hostname(a.id);
  node->set_address(a.id);
  node->set_agent_version("control_plane_bench simulated agent");
  v1::NodeResources* res = node->mutable_resources();
  res->set_memory_bytes(int64_t{2} << 40);
  for (int g = 0; g < gpus; ++g) {
    v1::Gpu* gpu = res->add_gpus();
    gpu->set_index(g);
    gpu->set_name("NVIDIA H100 80GB HBM3");
    gpu->set_memory_bytes(gpu_memory_bytes);
    gpu->set_uuid("GPU-" + a.id + "-" + std::to_string(g));
  }
}

void FillHeartbeatRequest(SimAgent& a, v1::HeartbeatRequest* req) {
  req->set_node_id(a.id);
  for (SimRank& r : a.ranks) {
    v1::RankStatus* s = req->add_ranks();
    s->set_job_id(r.job_id);
    s->set_attempt(r.attempt);
    s->set_world_rank(r.world_rank);
    s->set_pid(r.pid);
    if (r.wanted) {
      s->set_state(v1::RANK_PROCESS_STATE_RUNNING);
    } else {  // stopped by this agent because the controller no longer lists it
      s->set_state(v1::RANK_PROCESS_STATE_EXITED);
      s->set_exit_code(-1);
      s->set_signal(15);
      s->set_stopped_by_agent(true);
      r.exit_sent = true;
    }
  }
  a.relayed.clear();
  for (SimRank& r : a.ranks) {
    if (!r.relay_pending) continue;
    a.relayed.emplace_back(r.job_id, r.attempt, r.world_rank);
    *req->add_progress() = std::move(r.pending);
    r.relay_pending = false;
  }
}

bool ApplyHeartbeatResponse(SimAgent& a, const v1::HeartbeatResponse& resp, int64_t* next_pid,
                            bool every_rank_reports) {
  // One heartbeat is in flight at a time, so it carried every rank the agent has.
  for (SimRank& r : a.ranks) {
    if (r.wanted) r.reported = true;
  }
  a.ranks.erase(
      std::remove_if(a.ranks.begin(), a.ranks.end(), [](const SimRank& r) { return r.exit_sent; }),
      a.ranks.end());
  for (SimRank& r : a.ranks) r.wanted = false;
  for (const v1::RankLaunch& l : resp.ranks()) {
    if (SimRank* r = FindRank(a, l.job_id(), l.attempt(), l.world_rank())) {
      r->wanted = true;
      continue;
    }
    SimRank r;
    r.job_id = l.job_id();
    r.attempt = l.attempt();
    r.world_rank = l.world_rank();
    r.reports = every_rank_reports || r.world_rank == 0;
    r.pid = 100000 + ((*next_pid)++ % 4000000);
    a.ranks.push_back(std::move(r));
  }
  return std::any_of(a.ranks.begin(), a.ranks.end(),
                     [](const SimRank& r) { return r.Reporting(); });
}

void HeartbeatFailed(SimAgent& a) {
  for (SimRank& r : a.ranks) r.exit_sent = false;
}

namespace {

void FillRankMetrics(const SimRank& r, int step_ms,
                     google::protobuf::Map<std::string, double>& m) {
  const double step_s = step_ms / 1000.0, step = static_cast<double>(r.step);
  m["vision_tokens_per_s"] = 16384 / step_s;
  m["text_tokens_per_s"] = 8192 / step_s;
  m["forward_s"] = 0.3 * step_s;
  m["backward_s"] = 0.55 * step_s;
  m["comm_s"] = 0.1 * step_s;
  m["optimizer_s"] = 0.05 * step_s;
  m["memory_rss_bytes"] = 12e9 + r.world_rank;
  m["memory_allocated_bytes"] = 61e9 + 1e6 * (r.step % 7);
  m["memory_reserved_bytes"] = 70e9;
  m["memory_peak_bytes"] = 66e9 + r.world_rank;
  m["mfu_vision"] = 0.41;
  m["mfu_text"] = 0.47;
  const std::string sp = std::to_string(r.world_rank / 2), dp = std::to_string(r.world_rank % 2);
  m["comm_bytes:vision.sp" + sp] = 2.1e9 * step;
  m["comm_bytes:vision.dp" + dp] = 1.3e9 * step;
  m["comm_bytes:text.tp" + sp] = 4.2e9 * step;
  m["comm_bytes:text.dp" + dp] = 2.6e9 * step;
  m["comm_bytes:world"] = 64 * step;
  // What JobRank::StepMetrics adds.
  m["grad_norm"] = 1.5 / (1 + 0.001 * step);
  m["lr"] = 1e-4;
  m["samples"] = 8;
  m["tokens"] = 8192;
  m["image_tokens"] = 16384;
  m["loss_tokens"] = 6000;
  m["data_seconds"] = 0.01 * step_s;
}

}  // namespace

void FillProgressRequest(SimRank& r, int step_ms, bool rank_metrics,
                         v1::ReportProgressRequest* req) {
  req->set_job_id(r.job_id);
  req->set_attempt(r.attempt);
  req->set_rank(r.world_rank);
  req->set_step(++r.step);
  req->set_loss(2.0 / (1.0 + 0.01 * static_cast<double>(r.step)));
  req->set_total_steps(1000000);
  req->set_tokens_per_second(1000);
  req->set_step_seconds(step_ms / 1000.0);
  if (rank_metrics) FillRankMetrics(r, step_ms, *req->mutable_metrics());
}

SimRank* FindRank(SimAgent& a, const std::string& job_id, int32_t attempt, int32_t world_rank) {
  for (SimRank& r : a.ranks) {
    if (r.world_rank == world_rank && r.attempt == attempt && r.job_id == job_id) return &r;
  }
  return nullptr;
}

}  // namespace dhp::bench
