#include "controller/run_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>

#include "common/job_layout.h"
#include "common/layout.h"
#include "common/proto_enum.h"

namespace dhp::controller {
namespace {

// Registration order = exposition order. Keep in sync with the header comment.
const std::vector<GaugeFamilyDef>& Families() {
  static const std::vector<GaugeFamilyDef> defs = {
      {"dhp_job_step", "Current training step of the job's run.", {"job"}},
      {"dhp_job_total_steps", "Steps the job trains to.", {"job"}},
      {"dhp_job_loss", "Newest training loss of the job.", {"job"}},
      {"dhp_job_learning_rate", "Newest learning rate of the job.", {"job"}},
      {"dhp_job_grad_norm", "Newest global gradient norm of the job.", {"job"}},
      {"dhp_job_restarts", "Automatic restarts the job has used.", {"job"}},
      {"dhp_job_queue_wait_seconds", "Time the job's current run waited in the queue.", {"job"}},
      {"dhp_job_tokens_per_second", "Newest throughput of the job's run, all stages.", {"job"}},
      {"dhp_job_step_seconds", "Newest step time of the job's run.", {"job"}},
      {"dhp_job_state", "1 for the job's current state.", {"job", "state"}},
      {"dhp_job_last_progress_timestamp_seconds",
       "Unix time at which the step of the job's placed run last advanced (or it was placed).",
       {"job"}},
      {"dhp_stage_tokens_per_second",
       "Tokens per second of a stage on a rank.",
       {"job", "stage", "rank"}},
      {"dhp_stage_step_seconds",
       "Newest step time of a stage on a rank, by phase (forward, backward, comm, optimizer).",
       {"job", "stage", "rank", "phase"}},
      {"dhp_stage_memory_bytes",
       "Memory of a rank hosting a stage: allocated, reserved, peak (CUDA caching allocator) "
       "or rss (resident set).",
       {"job", "stage", "rank", "kind"}},
      {"dhp_stage_mfu",
       "Model FLOPs utilisation of a stage on a rank (0..1; ranks with a known device peak).",
       {"job", "stage", "rank"}},
      {"dhp_collective_bytes",
       "Bytes by tensor size (the collectives' algorithmic volume, not bytes on the wire) a "
       "rank sent plus received on a process group since it started.",
       {"job", "rank", "group"}},
      {"dhp_rank_step", "Newest step a rank reported.", {"job", "rank"}},
      {"dhp_rank_last_report_timestamp_seconds",
       "Unix time of a rank's newest progress report.",
       {"job", "rank"}},
      {"dhp_rank_memory_capacity_bytes",
       "Memory of a rank's device (GPU memory; on CPU nodes node memory / CPU slots).",
       {"job", "rank"}},
      {"dhp_checkpoint_step", "Step of the job's newest complete checkpoint.", {"job"}},
      {"dhp_checkpoint_write_seconds",
       "Write time (slowest shard) of the job's newest complete checkpoint.",
       {"job"}},
      {"dhp_checkpoint_size_bytes",
       "Size (all shards) of the job's newest complete checkpoint.",
       {"job"}},
      {"dhp_slots", "Rank slots (GPUs or CPU slots) of the cluster: total, used, free.", {"kind"}},
      {"dhp_queued_jobs", "Jobs waiting in the scheduler's queue.", {}},
      {"dhp_node_slots", "Rank slots of a node: total, used.", {"node", "kind"}},
      {"dhp_device_memory_bytes",
       "Memory of a node's device: a GPU (device = index) or the host of a CPU node.",
       {"node", "device"}},
  };
  return defs;
}

constexpr const char* kPhases[] = {"forward", "backward", "comm", "optimizer"};
constexpr const char* kMemoryKinds[] = {"allocated", "reserved", "peak", "rss"};
constexpr char kCommBytesPrefix[] = "comm_bytes:";

std::optional<double> Lookup(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end() || !std::isfinite(it->second)) return std::nullopt;
  return it->second;
}

// The per-stage key if the rank sent one, else the process-wide key.
std::optional<double> StageOr(const std::map<std::string, double>& m, const std::string& stage,
                              const std::string& key) {
  if (std::optional<double> v = Lookup(m, stage + "_" + key)) return v;
  return Lookup(m, key);
}

// The value of `key` from the lowest rank that reported it.
std::optional<double> FirstRank(const ActiveRun& run, std::initializer_list<const char*> keys) {
  for (const RankView& r : run.ranks) {
    for (const char* key : keys) {
      if (std::optional<double> v = Lookup(r.metrics, key)) return v;
    }
  }
  return std::nullopt;
}

// Appends samples to the rows of a scrape.
class Rows {
 public:
  explicit Rows(MetricRows& out) : out_(out) {}
  void Add(const char* family, std::vector<std::string> labels, double value) {
    out_[family].push_back({std::move(labels), value});
  }

 private:
  MetricRows& out_;
};

double Seconds(int64_t micros) { return static_cast<double>(micros) / 1e6; }

void AddRanks(const ActiveRun& run, const v1::Job& job,
              const std::map<std::string, const v1::Node*>& nodes, Rows& rows) {
  const std::string& id = job.id();
  const comm::Layout layout = LayoutForSpec(job.spec());
  for (size_t w = 0; w < run.ranks.size(); ++w) {
    const RankView& r = run.ranks[w];
    const std::string rank = std::to_string(w);
    if (w < run.placement.size()) {
      const v1::RankPlacement& p = run.placement[w];
      auto node = nodes.find(p.node_id());
      if (node != nodes.end()) {
        const v1::NodeResources& res = node->second->resources();
        int64_t capacity = 0;
        if (p.gpu()) {
          for (const v1::Gpu& g : res.gpus()) {
            if (g.index() == p.slot()) capacity = g.memory_bytes();
          }
        } else if (res.cpu_slots() > 0) {
          capacity = res.memory_bytes() / res.cpu_slots();
        }
        if (capacity > 0) {
          rows.Add("dhp_rank_memory_capacity_bytes", {id, rank}, static_cast<double>(capacity));
        }
      }
    }
    if (r.report_micros == 0) continue;  // nothing reported yet
    rows.Add("dhp_rank_step", {id, rank}, static_cast<double>(std::max<int64_t>(r.step, 0)));
    rows.Add("dhp_rank_last_report_timestamp_seconds", {id, rank}, Seconds(r.report_micros));
    std::vector<std::string> stages;
    if (static_cast<int>(w) < layout.WorldSize()) {
      if (comm::VisionCoord(layout, static_cast<int>(w))) stages.push_back("vision");
      if (comm::TextCoord(layout, static_cast<int>(w))) stages.push_back("text");
    }
    for (const std::string& stage : stages) {
      const std::map<std::string, double>& m = r.metrics;
      if (std::optional<double> v = Lookup(m, stage + "_tokens_per_s")) {
        rows.Add("dhp_stage_tokens_per_second", {id, stage, rank}, *v);
      }
      for (const char* phase : kPhases) {
        if (std::optional<double> v = StageOr(m, stage, std::string(phase) + "_s")) {
          rows.Add("dhp_stage_step_seconds", {id, stage, rank, phase}, *v);
        }
      }
      for (const char* kind : kMemoryKinds) {
        const std::string key = "memory_" + std::string(kind) + "_bytes";
        if (std::optional<double> v = StageOr(m, stage, key)) {
          rows.Add("dhp_stage_memory_bytes", {id, stage, rank, kind}, *v);
        }
      }
      if (std::optional<double> v = Lookup(m, "mfu_" + stage)) {
        rows.Add("dhp_stage_mfu", {id, stage, rank}, *v);
      }
    }
    for (auto it = r.metrics.lower_bound(kCommBytesPrefix); it != r.metrics.end(); ++it) {
      if (it->first.rfind(kCommBytesPrefix, 0) != 0) break;
      const std::string group = it->first.substr(sizeof(kCommBytesPrefix) - 1);
      if (group.empty() || !std::isfinite(it->second)) continue;
      rows.Add("dhp_collective_bytes", {id, rank, group}, it->second);
    }
  }
}

// The job's rows; `run`: its live run (nullptr when it has only draining ones).
void AddJob(const StoredJob& stored, const ActiveRun* run,
            const std::map<std::string, const v1::Node*>& nodes, Rows& rows) {
  const v1::Job& job = stored.job;
  const std::string& id = job.id();
  const bool reported =
      run != nullptr && std::any_of(run->ranks.begin(), run->ranks.end(),
                                    [](const RankView& r) { return r.report_micros > 0; });

  rows.Add("dhp_job_state", {id, ShortName(job.state())}, 1);
  rows.Add("dhp_job_restarts", {id}, job.restart_count());
  const int64_t step = run != nullptr ? std::max<int64_t>(run->max_step, 0) : job.latest_step();
  rows.Add("dhp_job_step", {id}, static_cast<double>(step));
  const int64_t total = run != nullptr && run->total_steps > 0 ? run->total_steps
                                                               : job.total_steps();
  if (total > 0) rows.Add("dhp_job_total_steps", {id}, static_cast<double>(total));
  if (reported && std::isfinite(run->loss) && run->max_step > run->start_step) {
    rows.Add("dhp_job_loss", {id}, run->loss);
  } else if (job.latest_step() > 0 && std::isfinite(job.latest_loss())) {
    rows.Add("dhp_job_loss", {id}, job.latest_loss());
  }
  if (run != nullptr) {
    if (std::optional<double> lr = FirstRank(*run, {"lr", "learning_rate"})) {
      rows.Add("dhp_job_learning_rate", {id}, *lr);
    }
    if (std::optional<double> g = FirstRank(*run, {"grad_norm"})) {
      rows.Add("dhp_job_grad_norm", {id}, *g);
    }
    if (run->tokens_per_second > 0) {
      rows.Add("dhp_job_tokens_per_second", {id}, run->tokens_per_second);
    }
    if (run->step_seconds > 0) rows.Add("dhp_job_step_seconds", {id}, run->step_seconds);
    rows.Add("dhp_job_last_progress_timestamp_seconds", {id}, Seconds(run->last_advance_micros));
    AddRanks(*run, job, nodes, rows);
  }
  if (stored.current_run && stored.current_run->placement_size() > 0) {
    rows.Add("dhp_job_queue_wait_seconds", {id}, stored.current_run->queue_wait_seconds());
  }
  if (stored.checkpoint) {
    const v1::Checkpoint& c = *stored.checkpoint;
    rows.Add("dhp_checkpoint_step", {id}, static_cast<double>(c.step()));
    rows.Add("dhp_checkpoint_write_seconds", {id}, c.write_seconds());
    rows.Add("dhp_checkpoint_size_bytes", {id}, static_cast<double>(c.size_bytes()));
  }
}

}  // namespace

RunMetricsBuilder::RunMetricsBuilder(std::vector<v1::Node> nodes) : nodes_(std::move(nodes)) {
  for (const v1::Node& n : nodes_) by_id_[n.id()] = &n;
}

void RunMetricsBuilder::AddRuns(const std::vector<const ActiveRun*>& runs,
                                const StoredJobs& jobs) {
  Rows rows(rows_);
  // Per job: its current, not draining run if there is one (else its newest draining one only
  // keeps the job's rows alive while its ranks exit).
  std::map<std::string, const ActiveRun*> live;
  std::set<std::string> job_ids;
  for (const ActiveRun* run : runs) {
    job_ids.insert(run->id.job_id);
    for (const v1::RankPlacement& p : run->placement) used_by_node_[p.node_id()]++;
    auto job = jobs.find(run->id.job_id);
    if (job == jobs.end()) continue;
    if (!run->draining && run->id.attempt == job->second.job.current_attempt()) {
      live[run->id.job_id] = run;
    }
  }
  for (const std::string& id : job_ids) {
    auto stored = jobs.find(id);
    if (stored == jobs.end()) continue;  // deleted between the reads: nothing to say
    auto live_it = live.find(id);
    AddJob(stored->second, live_it == live.end() ? nullptr : live_it->second, by_id_, rows);
  }
}

MetricRows RunMetricsBuilder::Finish(const ClusterSlots& slots) {
  Rows rows(rows_);
  rows.Add("dhp_slots", {"total"}, slots.total);
  rows.Add("dhp_slots", {"used"}, slots.used);
  rows.Add("dhp_slots", {"free"}, slots.free);
  rows.Add("dhp_queued_jobs", {}, static_cast<double>(slots.queued_jobs));
  for (const v1::Node& n : nodes_) {
    const v1::NodeResources& res = n.resources();
    const int total = res.gpus_size() > 0 ? res.gpus_size() : res.cpu_slots();
    rows.Add("dhp_node_slots", {n.id(), "total"}, total);
    rows.Add("dhp_node_slots", {n.id(), "used"}, used_by_node_[n.id()]);
    if (res.gpus_size() > 0) {
      for (const v1::Gpu& g : res.gpus()) {
        if (g.memory_bytes() > 0) {
          rows.Add("dhp_device_memory_bytes", {n.id(), std::to_string(g.index())},
                   static_cast<double>(g.memory_bytes()));
        }
      }
    } else if (res.memory_bytes() > 0) {
      rows.Add("dhp_device_memory_bytes", {n.id(), "host"},
               static_cast<double>(res.memory_bytes()));
    }
  }
  return std::move(rows_);
}

MetricRows ComputeRunMetrics(const RunMetricsInput& in) {
  RunMetricsBuilder builder(in.nodes);
  builder.AddRuns(in.runs, in.jobs);
  return builder.Finish(in.slots);
}

StoredJobs ReadStoredJobs(Store& store, const std::set<std::string>& job_ids) {
  StoredJobs out;
  for (const std::string& id : job_ids) {
    absl::StatusOr<v1::Job> job = store.GetJob(id);
    if (!job.ok()) continue;
    StoredJob& s = out[id];
    for (const v1::Run& r : store.ListRuns(id)) {
      if (r.attempt() == job->current_attempt()) s.current_run = r;
    }
    const std::vector<v1::Checkpoint> ckpts = store.ListCheckpoints(id);
    for (auto c = ckpts.rbegin(); c != ckpts.rend(); ++c) {
      if (c->state() == v1::CHECKPOINT_STATE_COMPLETE) {
        s.checkpoint = *c;
        break;
      }
    }
    s.job = *std::move(job);
  }
  return out;
}

ClusterSlots ReadClusterSlots(const Supervisor& supervisor) {
  ClusterSlots slots;
  slots.total = supervisor.scheduler().total_slots();
  slots.used = supervisor.scheduler().used_slots();
  slots.free = supervisor.scheduler().free_slots();
  slots.queued_jobs = static_cast<int64_t>(supervisor.queue_size());
  return slots;
}

RunMetricsInput GatherRunMetricsInput(const Supervisor& supervisor, Store& store,
                                      std::vector<v1::Node> nodes) {
  RunMetricsInput in;
  in.nodes = std::move(nodes);
  in.slots = ReadClusterSlots(supervisor);
  std::set<std::string> job_ids;
  for (const auto& [key, run] : supervisor.runs()) {
    in.runs.push_back(&run);
    job_ids.insert(run.id.job_id);
  }
  in.jobs = ReadStoredJobs(store, job_ids);
  return in;
}

RunMetrics::RunMetrics(MetricsExposition& metrics)
    : gauges_(metrics.AddComputedGauges(Families())) {}

void RunMetrics::Set(const MetricRows& rows) { gauges_.Set(rows); }

std::vector<std::string> RunMetrics::FamilyNames() {
  std::vector<std::string> names;
  for (const GaugeFamilyDef& def : Families()) names.push_back(def.name);
  return names;
}

}  // namespace dhp::controller
