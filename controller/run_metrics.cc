#include "controller/run_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>

#include "common/check.h"
#include "common/job_layout.h"
#include "common/layout.h"
#include "common/proto_enum.h"

namespace dhp::controller {
namespace {

// The families, by their position in FamilyDefs() (= registration order = exposition order).
enum Family : size_t {
  kJobStep,
  kJobTotalSteps,
  kJobLoss,
  kJobLearningRate,
  kJobGradNorm,
  kJobRestarts,
  kJobQueueWait,
  kJobTokensPerSecond,
  kJobStepSeconds,
  kJobState,
  kJobLastProgress,
  kJobStageTokens,
  kJobStageStepSeconds,
  kJobStageMemory,
  kJobStageMfu,
  kJobMemoryUsedRatio,
  kStageTokens,
  kStageStepSeconds,
  kStageMemory,
  kStageMfu,
  kCollectiveBytes,
  kRankStep,
  kRankLastReport,
  kRankMemoryCapacity,
  kCheckpointStep,
  kCheckpointWriteSeconds,
  kCheckpointSize,
  kSlots,
  kQueuedJobs,
  kNodeSlots,
  kDeviceMemory,
  kRankSeries,
  kFamilies
};

// Registration order = exposition order: that of enum Family (checked). Keep in sync with the
// header comment.
struct PlacedDef {
  Family position;
  GaugeFamilyDef def;
};

// `placed` in enum Family's order, or a crash: the rows name families by position.
std::vector<GaugeFamilyDef> InOrder(std::vector<PlacedDef> placed) {
  DHP_CHECK(placed.size() == kFamilies) << placed.size() << " families for " << kFamilies;
  std::vector<GaugeFamilyDef> defs;
  for (size_t f = 0; f < placed.size(); ++f) {
    DHP_CHECK(placed[f].position == f) << placed[f].def.name << " is not family " << f;
    defs.push_back(std::move(placed[f].def));
  }
  return defs;
}

const std::vector<GaugeFamilyDef>& FamilyDefs() {
  static const std::vector<GaugeFamilyDef> defs = InOrder({
      {kJobStep, {"dhp_job_step", "Current training step of the job's run.", {"job"}}},
      {kJobTotalSteps, {"dhp_job_total_steps", "Steps the job trains to.", {"job"}}},
      {kJobLoss, {"dhp_job_loss", "Newest training loss of the job.", {"job"}}},
      {kJobLearningRate, {"dhp_job_learning_rate", "Newest learning rate of the job.", {"job"}}},
      {kJobGradNorm, {"dhp_job_grad_norm", "Newest global gradient norm of the job.", {"job"}}},
      {kJobRestarts, {"dhp_job_restarts", "Automatic restarts the job has used.", {"job"}}},
      {kJobQueueWait,
       {"dhp_job_queue_wait_seconds",
        "Time the job's current run waited in the queue.",
        {"job"}}},
      {kJobTokensPerSecond,
       {"dhp_job_tokens_per_second",
        "Newest throughput of the job's run, all stages.",
        {"job"}}},
      {kJobStepSeconds, {"dhp_job_step_seconds", "Newest step time of the job's run.", {"job"}}},
      {kJobState, {"dhp_job_state", "1 for the job's current state.", {"job", "state"}}},
      {kJobLastProgress,
       {"dhp_job_last_progress_timestamp_seconds",
        "Unix time at which the step of the job's placed run last advanced (or it was placed).",
        {"job"}}},
      {kJobStageTokens,
       {"dhp_job_stage_tokens_per_second",
        "Highest tokens per second among the ranks hosting a stage of the job's run.",
        {"job", "stage"}}},
      {kJobStageStepSeconds,
       {"dhp_job_stage_step_seconds",
        "Longest step time, by phase, among the ranks hosting a stage of the job's run.",
        {"job", "stage", "phase"}}},
      {kJobStageMemory,
       {"dhp_job_stage_memory_bytes",
        "Most memory, by kind, among the ranks hosting a stage of the job's run.",
        {"job", "stage", "kind"}}},
      {kJobStageMfu,
       {"dhp_job_stage_mfu",
        "Mean model FLOPs utilisation of the ranks hosting a stage (those that report it).",
        {"job", "stage"}}},
      {kJobMemoryUsedRatio,
       {"dhp_job_memory_used_ratio",
        "Highest share of its device's memory a rank of the job's run uses: reserved (CUDA "
        "caching allocator), else resident set, over the device's memory.",
        {"job"}}},
      {kStageTokens,
       {"dhp_stage_tokens_per_second",
        "Tokens per second of a stage on a rank.",
        {"job", "stage", "rank"}}},
      {kStageStepSeconds,
       {"dhp_stage_step_seconds",
        "Newest step time of a stage on a rank, by phase (forward, backward, comm, optimizer).",
        {"job", "stage", "rank", "phase"}}},
      {kStageMemory,
       {"dhp_stage_memory_bytes",
        "Memory of a rank hosting a stage: allocated, reserved, peak (CUDA caching allocator) "
        "or rss (resident set).",
        {"job", "stage", "rank", "kind"}}},
      {kStageMfu,
       {"dhp_stage_mfu",
        "Model FLOPs utilisation of a stage on a rank (0..1; ranks with a known device peak).",
        {"job", "stage", "rank"}}},
      {kCollectiveBytes,
       {"dhp_collective_bytes",
        "Bytes by tensor size (the collectives' algorithmic volume, not bytes on the wire) a "
        "rank sent plus received on a process group since it started.",
        {"job", "rank", "group"}}},
      {kRankStep, {"dhp_rank_step", "Newest step a rank reported.", {"job", "rank"}}},
      {kRankLastReport,
       {"dhp_rank_last_report_timestamp_seconds",
        "Unix time of a rank's newest progress report.",
        {"job", "rank"}}},
      {kRankMemoryCapacity,
       {"dhp_rank_memory_capacity_bytes",
        "Memory of a rank's device (GPU memory; on CPU nodes node memory / CPU slots).",
        {"job", "rank"}}},
      {kCheckpointStep,
       {"dhp_checkpoint_step",
        "Step of the job's newest complete checkpoint.",
        {"job"}}},
      {kCheckpointWriteSeconds,
       {"dhp_checkpoint_write_seconds",
        "Write time (slowest shard) of the job's newest complete checkpoint.",
        {"job"}}},
      {kCheckpointSize,
       {"dhp_checkpoint_size_bytes",
        "Size (all shards) of the job's newest complete checkpoint.",
        {"job"}}},
      {kSlots,
       {"dhp_slots",
        "Rank slots (GPUs or CPU slots) of the cluster: total, used, free.",
        {"kind"}}},
      {kQueuedJobs, {"dhp_queued_jobs", "Jobs waiting in the scheduler's queue.", {}}},
      {kNodeSlots, {"dhp_node_slots", "Rank slots of a node: total, used.", {"node", "kind"}}},
      {kDeviceMemory,
       {"dhp_device_memory_bytes",
        "Memory of a node's device: a GPU (device = index) or the host of a CPU node.",
        {"node", "device"}}},
      {kRankSeries,
       {"dhp_metrics_rank_series",
        "1 while the per-rank families are exported: placed ranks <= "
        "metrics.rank_series_max_ranks.",
        {}}},
  });
  return defs;
}

constexpr const char* kPhases[] = {"forward", "backward", "comm", "optimizer"};
constexpr const char* kMemoryKinds[] = {"allocated", "reserved", "peak", "rss"};
constexpr char kCommBytesPrefix[] = "comm_bytes:";

// The keys of ReportProgressRequest.metrics a stage's rows read, built once.
struct StageKeys {
  explicit StageKeys(const std::string& stage) : name(stage) {
    tokens = stage + "_tokens_per_s";
    mfu = "mfu_" + stage;
    for (int i = 0; i < 4; ++i) {
      phase[i] = std::string(kPhases[i]) + "_s";
      stage_phase[i] = stage + "_" + phase[i];
      memory[i] = "memory_" + std::string(kMemoryKinds[i]) + "_bytes";
      stage_memory[i] = stage + "_" + memory[i];
    }
  }
  std::string name;                   // vision | text
  std::string tokens, mfu;            // <stage>_tokens_per_s, mfu_<stage>
  std::string phase[4], stage_phase[4];    // <phase>_s, <stage>_<phase>_s
  std::string memory[4], stage_memory[4];  // memory_<kind>_bytes, <stage>_memory_<kind>_bytes
};

const StageKeys& VisionKeys() {
  static const StageKeys* const keys = new StageKeys("vision");
  return *keys;
}

const StageKeys& TextKeys() {
  static const StageKeys* const keys = new StageKeys("text");
  return *keys;
}

std::optional<double> Lookup(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end() || !std::isfinite(it->second)) return std::nullopt;
  return it->second;
}

// The per-stage key if the rank sent one, else the process-wide key.
std::optional<double> StageOr(const std::map<std::string, double>& m,
                              const std::string& stage_key, const std::string& key) {
  if (std::optional<double> v = Lookup(m, stage_key)) return v;
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

// Appends samples to the rows of a scrape; the per-rank families' only with `rank_series`.
class Rows {
 public:
  Rows(GaugeSink& out, bool rank_series) : out_(out), rank_series_(rank_series) {}
  void Add(Family family, std::initializer_list<std::string_view> labels, double value) {
    out_.Add(family, labels, value);
  }
  void AddRank(Family family, std::initializer_list<std::string_view> labels, double value) {
    if (rank_series_) out_.Add(family, labels, value);
  }

 private:
  GaugeSink& out_;
  const bool rank_series_;
};

double Seconds(int64_t micros) { return static_cast<double>(micros) / 1e6; }

// The memory of the device a rank is placed on (0: not known).
int64_t Capacity(const v1::RankPlacement& p, const v1::Node& node) {
  const v1::NodeResources& res = node.resources();
  if (p.gpu()) {
    for (const v1::Gpu& g : res.gpus()) {
      if (g.index() == p.slot()) return g.memory_bytes();
    }
    return 0;
  }
  return res.cpu_slots() > 0 ? res.memory_bytes() / res.cpu_slots() : 0;
}

void Max(std::optional<double>& acc, double v) { acc = acc ? std::max(*acc, v) : v; }

// One stage's figures over the job's ranks that host it: the highest, MFU the mean.
struct StageSummary {
  std::optional<double> tokens, phase[4], memory[4];
  double mfu_sum = 0;
  int mfu_ranks = 0;
};

// The rows of one stage a reporting rank hosts, folded into `sum` as well. Returns the memory
// the rank uses for it: reserved (CUDA caching allocator), else resident set; 0: not reported.
double AddStage(std::string_view id, std::string_view rank, const StageKeys& k,
                const std::map<std::string, double>& m, Rows& rows, StageSummary& sum) {
  if (std::optional<double> v = Lookup(m, k.tokens)) {
    rows.AddRank(kStageTokens, {id, k.name, rank}, *v);
    Max(sum.tokens, *v);
  }
  for (int i = 0; i < 4; ++i) {
    if (std::optional<double> v = StageOr(m, k.stage_phase[i], k.phase[i])) {
      rows.AddRank(kStageStepSeconds, {id, k.name, rank, kPhases[i]}, *v);
      Max(sum.phase[i], *v);
    }
  }
  std::optional<double> memory[4];
  for (int i = 0; i < 4; ++i) {
    if ((memory[i] = StageOr(m, k.stage_memory[i], k.memory[i]))) {
      rows.AddRank(kStageMemory, {id, k.name, rank, kMemoryKinds[i]}, *memory[i]);
      Max(sum.memory[i], *memory[i]);
    }
  }
  if (std::optional<double> v = Lookup(m, k.mfu)) {
    rows.AddRank(kStageMfu, {id, k.name, rank}, *v);
    sum.mfu_sum += *v;
    ++sum.mfu_ranks;
  }
  static_assert(std::string_view(kMemoryKinds[1]) == "reserved" &&
                std::string_view(kMemoryKinds[3]) == "rss");
  return memory[1].value_or(memory[3].value_or(0));
}

void AddStageSummary(std::string_view id, const StageKeys& k, const StageSummary& sum,
                     Rows& rows) {
  if (sum.tokens) rows.Add(kJobStageTokens, {id, k.name}, *sum.tokens);
  for (int i = 0; i < 4; ++i) {
    if (sum.phase[i]) rows.Add(kJobStageStepSeconds, {id, k.name, kPhases[i]}, *sum.phase[i]);
  }
  for (int i = 0; i < 4; ++i) {
    if (sum.memory[i]) rows.Add(kJobStageMemory, {id, k.name, kMemoryKinds[i]}, *sum.memory[i]);
  }
  if (sum.mfu_ranks > 0) rows.Add(kJobStageMfu, {id, k.name}, sum.mfu_sum / sum.mfu_ranks);
}

void AddRanks(const ActiveRun& run, const v1::Job& job,
              const std::map<std::string, const v1::Node*>& nodes, Rows& rows) {
  const std::string& id = job.id();
  const comm::Layout layout = LayoutForSpec(job.spec());
  const v1::Node* node = nullptr;  // the last rank's: a node's ranks are neighbours
  StageSummary vision, text;
  std::optional<double> used_ratio;  // the highest of the ranks'
  for (size_t w = 0; w < run.ranks.size(); ++w) {
    const RankView& r = run.ranks[w];
    char buf[24];
    const std::string_view rank(buf, std::to_chars(buf, buf + sizeof(buf), w).ptr - buf);
    int64_t capacity = 0;
    if (w < run.placement.size()) {
      const v1::RankPlacement& p = run.placement[w];
      if (node == nullptr || node->id() != p.node_id()) {
        auto it = nodes.find(p.node_id());
        node = it == nodes.end() ? nullptr : it->second;
      }
      if (node != nullptr) capacity = Capacity(p, *node);
      if (capacity > 0) {
        rows.AddRank(kRankMemoryCapacity, {id, rank}, static_cast<double>(capacity));
      }
    }
    if (r.report_micros == 0) continue;  // nothing reported yet
    rows.AddRank(kRankStep, {id, rank}, static_cast<double>(std::max<int64_t>(r.step, 0)));
    rows.AddRank(kRankLastReport, {id, rank}, Seconds(r.report_micros));
    double used = 0;
    if (static_cast<int>(w) < layout.WorldSize()) {
      if (comm::VisionCoord(layout, static_cast<int>(w))) {
        used = std::max(used, AddStage(id, rank, VisionKeys(), r.metrics, rows, vision));
      }
      if (comm::TextCoord(layout, static_cast<int>(w))) {
        used = std::max(used, AddStage(id, rank, TextKeys(), r.metrics, rows, text));
      }
    }
    if (used > 0 && capacity > 0) Max(used_ratio, used / static_cast<double>(capacity));
    for (auto it = r.metrics.lower_bound(kCommBytesPrefix); it != r.metrics.end(); ++it) {
      if (it->first.rfind(kCommBytesPrefix, 0) != 0) break;
      const std::string_view group =
          std::string_view(it->first).substr(sizeof(kCommBytesPrefix) - 1);
      if (group.empty() || !std::isfinite(it->second)) continue;
      rows.AddRank(kCollectiveBytes, {id, rank, group}, it->second);
    }
  }
  AddStageSummary(id, VisionKeys(), vision, rows);
  AddStageSummary(id, TextKeys(), text, rows);
  if (used_ratio) rows.Add(kJobMemoryUsedRatio, {id}, *used_ratio);
}

// The job's rows; `run`: its live run (nullptr when it has only draining ones).
void AddJob(const StoredJob& stored, const ActiveRun* run,
            const std::map<std::string, const v1::Node*>& nodes, Rows& rows) {
  const v1::Job& job = stored.job;
  const std::string& id = job.id();
  const bool reported =
      run != nullptr && std::any_of(run->ranks.begin(), run->ranks.end(),
                                    [](const RankView& r) { return r.report_micros > 0; });

  rows.Add(kJobState, {id, ShortName(job.state())}, 1);
  rows.Add(kJobRestarts, {id}, job.restart_count());
  const int64_t step = run != nullptr ? std::max<int64_t>(run->max_step, 0) : job.latest_step();
  rows.Add(kJobStep, {id}, static_cast<double>(step));
  const int64_t total = run != nullptr && run->total_steps > 0 ? run->total_steps
                                                               : job.total_steps();
  if (total > 0) rows.Add(kJobTotalSteps, {id}, static_cast<double>(total));
  if (reported && std::isfinite(run->loss) && run->max_step > run->start_step) {
    rows.Add(kJobLoss, {id}, run->loss);
  } else if (job.latest_step() > 0 && std::isfinite(job.latest_loss())) {
    rows.Add(kJobLoss, {id}, job.latest_loss());
  }
  if (run != nullptr) {
    if (std::optional<double> lr = FirstRank(*run, {"lr", "learning_rate"})) {
      rows.Add(kJobLearningRate, {id}, *lr);
    }
    if (std::optional<double> g = FirstRank(*run, {"grad_norm"})) {
      rows.Add(kJobGradNorm, {id}, *g);
    }
    if (run->tokens_per_second > 0) {
      rows.Add(kJobTokensPerSecond, {id}, run->tokens_per_second);
    }
    if (run->step_seconds > 0) rows.Add(kJobStepSeconds, {id}, run->step_seconds);
    rows.Add(kJobLastProgress, {id}, Seconds(run->last_advance_micros));
    AddRanks(*run, job, nodes, rows);
  }
  if (stored.current_run && stored.current_run->placement_size() > 0) {
    rows.Add(kJobQueueWait, {id}, stored.current_run->queue_wait_seconds());
  }
  if (stored.checkpoint) {
    const v1::Checkpoint& c = *stored.checkpoint;
    rows.Add(kCheckpointStep, {id}, static_cast<double>(c.step()));
    rows.Add(kCheckpointWriteSeconds, {id}, c.write_seconds());
    rows.Add(kCheckpointSize, {id}, static_cast<double>(c.size_bytes()));
  }
}

}  // namespace

RunMetricsBuilder::RunMetricsBuilder(std::vector<v1::Node> nodes, GaugeSink& out,
                                     bool rank_series)
    : nodes_(std::move(nodes)), out_(out), rank_series_(rank_series) {
  for (const v1::Node& n : nodes_) by_id_[n.id()] = &n;
}

void RunMetricsBuilder::AddRuns(const std::vector<const ActiveRun*>& runs,
                                const StoredJobs& jobs) {
  Rows rows(out_, rank_series_);
  // Per job: its current, not draining run if there is one (else its newest draining one only
  // keeps the job's rows alive while its ranks exit).
  std::map<std::string, const ActiveRun*> live;
  std::set<std::string> job_ids;
  for (const ActiveRun* run : runs) {
    job_ids.insert(run->id.job_id);
    CountUsed(run->placement);
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

void RunMetricsBuilder::CountUsed(const std::vector<v1::RankPlacement>& placement) {
  // A node's ranks are neighbours: one map update per node.
  for (size_t i = 0; i < placement.size();) {
    size_t j = i + 1;
    while (j < placement.size() && placement[j].node_id() == placement[i].node_id()) ++j;
    used_by_node_[placement[i].node_id()] += static_cast<int>(j - i);
    i = j;
  }
}

void RunMetricsBuilder::Finish(const ClusterSlots& slots) {
  Rows rows(out_, rank_series_);
  rows.Add(kRankSeries, {}, rank_series_ ? 1 : 0);
  rows.Add(kSlots, {"total"}, slots.total);
  rows.Add(kSlots, {"used"}, slots.used);
  rows.Add(kSlots, {"free"}, slots.free);
  rows.Add(kQueuedJobs, {}, static_cast<double>(slots.queued_jobs));
  for (const v1::Node& n : nodes_) {
    const v1::NodeResources& res = n.resources();
    const int total = res.gpus_size() > 0 ? res.gpus_size() : res.cpu_slots();
    rows.Add(kNodeSlots, {n.id(), "total"}, total);
    rows.Add(kNodeSlots, {n.id(), "used"}, used_by_node_[n.id()]);
    if (res.gpus_size() > 0) {
      for (const v1::Gpu& g : res.gpus()) {
        if (g.memory_bytes() > 0) {
          rows.Add(kDeviceMemory, {n.id(), std::to_string(g.index())},
                   static_cast<double>(g.memory_bytes()));
        }
      }
    } else if (res.memory_bytes() > 0) {
      rows.Add(kDeviceMemory, {n.id(), "host"}, static_cast<double>(res.memory_bytes()));
    }
  }
}

MetricRows ComputeRunMetrics(const RunMetricsInput& in) {
  GaugeRowsCollector rows(FamilyDefs());
  RunMetricsBuilder builder(in.nodes, rows, in.rank_series);
  builder.AddRuns(in.runs, in.jobs);
  builder.Finish(in.slots);
  return rows.Take();
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
    : gauges_(metrics.AddComputedGauges(FamilyDefs())) {}

void RunMetrics::Set(const MetricRows& rows) { gauges_.Set(rows); }

void RunMetrics::Set(GaugeTextWriter&& text) { gauges_.Set(std::move(text)); }

GaugeTextWriter RunMetrics::Writer() const { return GaugeTextWriter(gauges_); }

const std::vector<GaugeFamilyDef>& RunMetrics::Families() { return FamilyDefs(); }

std::vector<std::string> RunMetrics::FamilyNames() {
  std::vector<std::string> names;
  for (const GaugeFamilyDef& def : FamilyDefs()) names.push_back(def.name);
  return names;
}

}  // namespace dhp::controller
