#include "controller/run_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

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

// The stages of the per-stage keys: scope 0 is a process-wide key (forward_s), 1 and 2 the
// stage's own (vision_forward_s, text_forward_s).
constexpr int kVision = 1, kText = 2;
constexpr const char* kStageNames[] = {"", "vision", "text"};

// What a known key of ReportProgressRequest.metrics holds.
struct KeySlot {
  enum Kind { kTokens, kMfu, kPhase, kMemory } kind;
  int scope;  // 0, kVision or kText
  int index;  // into kPhases or kMemoryKinds
};

// Every key a stage's rows read, with its slot: <stage>_tokens_per_s, mfu_<stage>,
// [<stage>_]<phase>_s and [<stage>_]memory_<kind>_bytes.
const std::unordered_map<std::string_view, KeySlot>& StageKeyTable() {
  static const auto* const table = [] {
    auto* keys = new std::deque<std::string>;  // the views' storage: a deque does not move it
    auto* t = new std::unordered_map<std::string_view, KeySlot>;
    const auto add = [&](std::string key, KeySlot slot) {
      keys->push_back(std::move(key));
      t->emplace(keys->back(), slot);
    };
    for (int scope = 0; scope <= kText; ++scope) {
      const std::string prefix = scope == 0 ? "" : std::string(kStageNames[scope]) + "_";
      for (int i = 0; i < 4; ++i) {
        add(prefix + kPhases[i] + "_s", {KeySlot::kPhase, scope, i});
        add(prefix + "memory_" + kMemoryKinds[i] + "_bytes", {KeySlot::kMemory, scope, i});
      }
      if (scope == 0) continue;
      add(prefix + "tokens_per_s", {KeySlot::kTokens, scope, 0});
      add(std::string("mfu_") + kStageNames[scope], {KeySlot::kMfu, scope, 0});
    }
    return t;
  }();
  return *table;
}

// A rank's figures for its stage rows, read in one pass over its metrics (a GPU rank sends
// ~17 keys; looking each row's key up, a stage's own and then the process-wide one, cost ~40
// map searches a rank). Non-finite values are left out.
struct RankFigures {
  explicit RankFigures(const std::map<std::string, double>& metrics) {
    const std::unordered_map<std::string_view, KeySlot>& table = StageKeyTable();
    for (const auto& [key, value] : metrics) {
      if (!std::isfinite(value)) continue;
      auto it = table.find(key);
      if (it == table.end()) continue;
      const KeySlot& k = it->second;
      switch (k.kind) {
        case KeySlot::kTokens: tokens[k.scope] = value; break;
        case KeySlot::kMfu: mfu[k.scope] = value; break;
        case KeySlot::kPhase: phase[k.scope][k.index] = value; break;
        case KeySlot::kMemory: memory[k.scope][k.index] = value; break;
      }
    }
  }
  // The stage's own key if the rank sent it, else the process-wide one.
  std::optional<double> Phase(int stage, int i) const {
    return phase[stage][i] ? phase[stage][i] : phase[0][i];
  }
  std::optional<double> Memory(int stage, int i) const {
    return memory[stage][i] ? memory[stage][i] : memory[0][i];
  }

  std::optional<double> tokens[3], mfu[3];  // by scope: kVision, kText
  std::optional<double> phase[3][4], memory[3][4];
};

std::optional<double> Lookup(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end() || !std::isfinite(it->second)) return std::nullopt;
  return it->second;
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
double AddStage(std::string_view id, std::string_view rank, int stage, const RankFigures& f,
                Rows& rows, StageSummary& sum) {
  const std::string_view name = kStageNames[stage];
  if (const std::optional<double>& v = f.tokens[stage]) {
    rows.AddRank(kStageTokens, {id, name, rank}, *v);
    Max(sum.tokens, *v);
  }
  for (int i = 0; i < 4; ++i) {
    if (std::optional<double> v = f.Phase(stage, i)) {
      rows.AddRank(kStageStepSeconds, {id, name, rank, kPhases[i]}, *v);
      Max(sum.phase[i], *v);
    }
  }
  for (int i = 0; i < 4; ++i) {
    if (std::optional<double> v = f.Memory(stage, i)) {
      rows.AddRank(kStageMemory, {id, name, rank, kMemoryKinds[i]}, *v);
      Max(sum.memory[i], *v);
    }
  }
  if (const std::optional<double>& v = f.mfu[stage]) {
    rows.AddRank(kStageMfu, {id, name, rank}, *v);
    sum.mfu_sum += *v;
    ++sum.mfu_ranks;
  }
  static_assert(std::string_view(kMemoryKinds[1]) == "reserved" &&
                std::string_view(kMemoryKinds[3]) == "rss");
  return f.Memory(stage, 1).value_or(f.Memory(stage, 3).value_or(0));
}

void AddStageSummary(std::string_view id, int stage, const StageSummary& sum, Rows& rows) {
  const std::string_view name = kStageNames[stage];
  if (sum.tokens) rows.Add(kJobStageTokens, {id, name}, *sum.tokens);
  for (int i = 0; i < 4; ++i) {
    if (sum.phase[i]) rows.Add(kJobStageStepSeconds, {id, name, kPhases[i]}, *sum.phase[i]);
  }
  for (int i = 0; i < 4; ++i) {
    if (sum.memory[i]) rows.Add(kJobStageMemory, {id, name, kMemoryKinds[i]}, *sum.memory[i]);
  }
  if (sum.mfu_ranks > 0) rows.Add(kJobStageMfu, {id, name}, sum.mfu_sum / sum.mfu_ranks);
}

void AddRanks(const ActiveRun& run, const v1::Job& job,
              const NodesById& nodes, Rows& rows) {
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
      const bool has_vision = comm::VisionCoord(layout, static_cast<int>(w)).has_value();
      const bool has_text = comm::TextCoord(layout, static_cast<int>(w)).has_value();
      if (has_vision || has_text) {
        const RankFigures figures(r.metrics);
        if (has_vision) used = AddStage(id, rank, kVision, figures, rows, vision);
        if (has_text) used = std::max(used, AddStage(id, rank, kText, figures, rows, text));
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
  AddStageSummary(id, kVision, vision, rows);
  AddStageSummary(id, kText, text, rows);
  if (used_ratio) rows.Add(kJobMemoryUsedRatio, {id}, *used_ratio);
}

// The job's rows; `run`: its live run (nullptr when it has only draining ones).
void AddJob(const StoredJob& stored, const ActiveRun* run,
            const NodesById& nodes, Rows& rows) {
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
    : nodes_(std::move(nodes)), out_(out), rank_series_(rank_series), used_(nodes_.size(), 0) {
  for (const v1::Node& n : nodes_) by_id_.emplace(n.id(), &n);
}

void RunMetricsBuilder::AddRuns(const std::vector<const ActiveRun*>& runs,
                                const StoredJobs& jobs) {
  Rows rows(out_, rank_series_);
  // A job's runs are neighbours: runs come in job order (Supervisor::runs()). Per job: its
  // current, not draining run if there is one (else its draining ones only keep the job's rows
  // alive while their ranks exit).
  for (size_t i = 0; i < runs.size();) {
    const std::string& job_id = runs[i]->id.job_id;
    DHP_CHECK(i == 0 || runs[i - 1]->id.job_id < job_id)
        << "RunMetricsBuilder::AddRuns: runs not in job order at " << job_id;
    auto stored = jobs.find(job_id);  // end: deleted between the reads, nothing to say
    const ActiveRun* live = nullptr;
    for (; i < runs.size() && runs[i]->id.job_id == job_id; ++i) {
      const ActiveRun* run = runs[i];
      CountUsed(run->placement);
      if (stored != jobs.end() && !run->draining &&
          run->id.attempt == stored->second.job.current_attempt()) {
        live = run;
      }
    }
    if (stored != jobs.end()) AddJob(stored->second, live, by_id_, rows);
  }
}

void RunMetricsBuilder::CountUsed(const std::vector<v1::RankPlacement>& placement) {
  // A node's ranks are neighbours: one update per node.
  for (size_t i = 0; i < placement.size();) {
    size_t j = i + 1;
    while (j < placement.size() && placement[j].node_id() == placement[i].node_id()) ++j;
    auto node = by_id_.find(placement[i].node_id());
    if (node != by_id_.end()) used_[node->second - nodes_.data()] += static_cast<int>(j - i);
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
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const v1::Node& n = nodes_[i];
    const v1::NodeResources& res = n.resources();
    const int total = res.gpus_size() > 0 ? res.gpus_size() : res.cpu_slots();
    rows.Add(kNodeSlots, {n.id(), "total"}, total);
    rows.Add(kNodeSlots, {n.id(), "used"}, used_[i]);
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

namespace {

void ReadStoredJob(Store& store, const std::string& id, StoredJobs& out) {
  absl::StatusOr<v1::Job> job = store.GetJob(id);
  if (!job.ok()) return;
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

}  // namespace

MetricRows ComputeRunMetrics(const RunMetricsInput& in) {
  GaugeRowsCollector rows(FamilyDefs());
  RunMetricsBuilder builder(in.nodes, rows, in.rank_series);
  builder.AddRuns(in.runs, in.jobs);
  builder.Finish(in.slots);
  return rows.Take();
}

StoredJobs ReadStoredJobs(Store& store, const std::set<std::string>& job_ids) {
  // Read transactions of this many jobs: a few ms each, so the WAL checkpointer waits little.
  constexpr int kJobsPerRead = 256;
  StoredJobs out;
  auto next = job_ids.begin();
  while (next != job_ids.end()) {
    store.ReadTogether([&] {
      for (int n = 0; n < kJobsPerRead && next != job_ids.end(); ++n, ++next) {
        ReadStoredJob(store, *next, out);
      }
    });
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
