// scheduler_bench: decisions per second and pass latency of the controller's Scheduler
// (controller/scheduler.h) on a simulated inventory.
//
//   bazel run //bench:scheduler_bench -- [--nodes 1024] [--gpus 8] [--jobs 10000]
//                                         [--full-rounds 5] [--steady-passes 2000]
//
// Inventory: --nodes GPU nodes of --gpus GPUs each (80 GiB per GPU). Queue: --jobs jobs of
// mixed shapes, drawn with a fixed --seed: world sizes 1, 2, 4, 8, 16, 32, 64 (weights 25,
// 20, 15, 15, 12, 8, 5), tensor-parallel groups of 1, 2, 4 or 8 consecutive ranks (at most the
// world size), priorities 0..4 uniform, a quarter of them asking 40 GiB per rank; plus 8 big
// jobs of 2,048 ranks (groups of 8) that fit the empty cluster but rarely a busy one, and 2 of
// (nodes x gpus + 8) ranks that never fit (the pass reports them as impossible).
//
// Measured:
//   (a) full pass: one Schedule() over the whole queue on an empty cluster (a fresh Scheduler
//       per round, --full-rounds rounds; medians).
//   (b) steady state: after (a), --steady-passes times: release a random running job (Release
//       is not timed), then one Schedule() over every job still waiting (timed).
// Reported: jobs considered per second (queue length / pass time), placements per second,
// pass latency (mean, p50, p99), and deterministic counters: jobs placed, slots used, why the
// rest wait. Prints a Markdown table last and writes it to <out-dir>/scheduler.md, with every
// number and the machine's description in <out-dir>/scheduler.json.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "controller/scheduler.h"
#include "nlohmann/json.hpp"

namespace dhp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using controller::JobDemand;
using controller::NodeCapacity;
using controller::Scheduler;
using controller::ScheduleResult;

constexpr int64_t kGiB = 1LL << 30;

int64_t NanosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

JobDemand MakeJob(int i, int world, int tp, int priority, int64_t memory) {
  JobDemand j;
  j.job_id = "j-" + std::to_string(i);
  j.priority = priority;
  j.submit_seq = i;
  j.world_size = world;
  j.memory_bytes_per_rank = memory;
  if (tp > 1) {
    for (int g = 0; g < world / tp; ++g) {
      std::vector<int> group(tp);
      std::iota(group.begin(), group.end(), g * tp);
      j.same_node_groups.push_back(std::move(group));
    }
  }
  return j;
}

std::vector<JobDemand> MakeQueue(int jobs, int cluster_slots, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int> worlds = {1, 2, 4, 8, 16, 32, 64};
  std::discrete_distribution<int> world_pick({25, 20, 15, 15, 12, 8, 5});
  std::uniform_int_distribution<int> tp_pick(0, 3), priority_pick(0, 4), quarter(0, 3);
  std::vector<JobDemand> queue;
  for (int i = 0; i < jobs; ++i) {
    const int world = worlds[world_pick(rng)];
    const int tp = std::min(world, 1 << tp_pick(rng));
    queue.push_back(MakeJob(i, world, tp, priority_pick(rng), quarter(rng) == 0 ? 40 * kGiB : 0));
  }
  // Big jobs spread through the queue: 8 that fit the empty cluster, 2 that never fit.
  std::uniform_int_distribution<int> where(0, jobs - 1);
  for (int k = 0; k < 10; ++k) {
    JobDemand& j = queue[where(rng)];
    j = MakeJob(std::stoi(j.job_id.substr(2)), k < 8 ? 2048 : cluster_slots + 8, 8,
                priority_pick(rng), 0);
  }
  return queue;
}

struct PassStats {
  std::vector<int64_t> nanos;
  int64_t considered = 0;
  int64_t placed = 0;
};

// "cannot run", "holds the reservation", "behind the reservation", "waiting for slots", other.
std::map<std::string, int> WaitKinds(const ScheduleResult& r) {
  std::map<std::string, int> kinds;
  for (const auto& [id, why] : r.waiting) {
    if (why.rfind("cannot run", 0) == 0) {
      ++kinds["cannot run"];
    } else if (why.rfind("behind", 0) == 0) {
      ++kinds["behind the reservation"];
    } else if (why.find("holds a reservation") != std::string::npos) {
      ++kinds["holds the reservation"];
    } else if (why.rfind("waiting for", 0) == 0) {
      ++kinds["waiting for slots"];
    } else {
      ++kinds["other"];
    }
  }
  return kinds;
}

Json StatsJson(const PassStats& s) {
  std::vector<int64_t> sorted = s.nanos;
  std::sort(sorted.begin(), sorted.end());
  const double total_s = std::accumulate(sorted.begin(), sorted.end(), 0.0) * 1e-9;
  return {{"passes", s.nanos.size()},
          {"jobs_considered", s.considered},
          {"placements", s.placed},
          {"total_seconds", total_s},
          {"considered_per_second", total_s > 0 ? s.considered / total_s : 0},
          {"placements_per_second", total_s > 0 ? s.placed / total_s : 0},
          {"mean_ms", sorted.empty() ? 0 : total_s * 1e3 / sorted.size()},
          {"p50_ms", PercentileMs(sorted, 0.5)},
          {"p99_ms", PercentileMs(sorted, 0.99)},
          {"max_ms", PercentileMs(sorted, 1.0)}};
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) {
  using namespace dhp;
  using namespace dhp::bench;
  int nodes = 1024, gpus = 8, jobs = 10000, full_rounds = 5, steady_passes = 2000;
  double max_steady_seconds = 60;
  uint64_t seed = 1;
  std::string out_dir = "bench/results";
  CLI::App app{"scheduler_bench: Scheduler decisions per second and pass latency"};
  app.add_option("--nodes", nodes, "GPU nodes")->check(CLI::PositiveNumber);
  app.add_option("--gpus", gpus, "GPUs per node")->check(CLI::PositiveNumber);
  app.add_option("--jobs", jobs, "Queued jobs")->check(CLI::Range(10, 1000000));
  app.add_option("--full-rounds", full_rounds, "Rounds of the full pass on an empty cluster")
      ->check(CLI::PositiveNumber);
  app.add_option("--steady-passes", steady_passes, "Release + Schedule passes")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-steady-seconds", max_steady_seconds,
                 "Stop the steady state after this much wall time");
  app.add_option("--seed", seed, "Seed of the queue and of the releases");
  app.add_option("--out-dir", out_dir,
                 "Where scheduler.md and scheduler.json go (relative: workspace)");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);

  Json machine = MachineInfo();
  const int cluster_slots = nodes * gpus;
  const std::vector<JobDemand> queue = MakeQueue(jobs, cluster_slots, seed);
  int64_t queued_ranks = 0;
  for (const JobDemand& j : queue) queued_ranks += j.world_size;

  const auto fill = [&](Scheduler& s) {
    for (int n = 0; n < nodes; ++n) {
      char id[32];
      std::snprintf(id, sizeof id, "node-%04d", n);
      s.UpsertNode(NodeCapacity{id, true, gpus, 80 * kGiB, true});
    }
  };

  // ---- (a) full pass on an empty cluster ---------------------------------------------------
  PassStats full;
  Scheduler sched;
  ScheduleResult first;
  for (int round = 0; round < full_rounds; ++round) {
    Scheduler s;
    fill(s);
    const Clock::time_point t0 = Clock::now();
    ScheduleResult r = s.Schedule(queue);
    full.nanos.push_back(NanosSince(t0));
    full.considered += static_cast<int64_t>(queue.size());
    full.placed += static_cast<int64_t>(r.placed.size());
    if (round == full_rounds - 1) first = std::move(r);
  }
  // The steady state starts from the state the last round left (replayed with Reserve).
  fill(sched);
  std::vector<std::string> running;
  for (const auto& d : first.placed) {
    if (!sched.Reserve(d.job_id, d.ranks).ok()) {
      std::cerr << "scheduler_bench: replaying the placement of " << d.job_id << " failed\n";
      return 1;
    }
    running.push_back(d.job_id);
  }
  const int full_used = sched.used_slots();
  const std::map<std::string, int> full_waits = WaitKinds(first);
  int full_backfilled = 0;
  for (const auto& d : first.placed) full_backfilled += d.backfilled;

  // ---- (b) steady state: release one running job, schedule the waiting ones ---------------
  std::vector<JobDemand> waiting;
  for (const JobDemand& j : queue) {
    if (first.waiting.count(j.job_id) > 0) waiting.push_back(j);
  }
  std::mt19937_64 rng(seed + 1);
  PassStats steady;
  int64_t steady_backfilled = 0;
  std::vector<double> utilisation;
  ScheduleResult last;
  const Clock::time_point steady_start = Clock::now();
  for (int p = 0; p < steady_passes && !running.empty(); ++p) {
    if (std::chrono::duration<double>(Clock::now() - steady_start).count() > max_steady_seconds) {
      break;
    }
    const size_t victim = std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
    sched.Release(running[victim]);
    running[victim] = running.back();
    running.pop_back();
    const Clock::time_point t0 = Clock::now();
    ScheduleResult r = sched.Schedule(waiting);
    steady.nanos.push_back(NanosSince(t0));
    steady.considered += static_cast<int64_t>(waiting.size());
    steady.placed += static_cast<int64_t>(r.placed.size());
    std::unordered_set<std::string> placed;
    for (const auto& d : r.placed) {
      placed.insert(d.job_id);
      running.push_back(d.job_id);
      steady_backfilled += d.backfilled;
    }
    if (!placed.empty()) {
      waiting.erase(std::remove_if(waiting.begin(), waiting.end(),
                                   [&](const JobDemand& j) { return placed.count(j.job_id); }),
                    waiting.end());
    }
    utilisation.push_back(static_cast<double>(sched.used_slots()) / cluster_slots);
    last = std::move(r);
  }
  const std::map<std::string, int> last_waits = WaitKinds(last);
  // Sanity: every slot in use belongs to exactly one running job.
  int64_t held = 0;
  for (const std::string& id : running) held += sched.AllocationOf(id).size();
  if (held != sched.used_slots() || sched.used_slots() + sched.free_slots() != cluster_slots) {
    std::cerr << "scheduler_bench: slot accounting is off: " << held << " held by jobs, "
              << sched.used_slots() << " used, " << sched.free_slots() << " free\n";
    return 1;
  }

  // ---- report -----------------------------------------------------------------------------
  const Json full_j = StatsJson(full), steady_j = StatsJson(steady);
  const std::string load_end = Trim(ReadFile("/proc/loadavg"));
  std::ostringstream md;
  md << "## scheduler_bench: Scheduler decisions per second and pass latency\n\n"
     << machine["date_utc"].get<std::string>() << ", " << machine["nproc"].get<int>() << " CPUs ("
     << machine["cpu_model"].get<std::string>() << "), shared with other work: load average "
     << machine["loadavg_at_start"].get<std::string>() << " at start, " << load_end
     << " at end; one thread. Inventory: " << nodes << " nodes x " << gpus << " GPUs ("
     << cluster_slots << " slots). Queue: " << jobs << " jobs, " << queued_ranks
     << " ranks in all (1-64 ranks with TP groups of 1/2/4/8, priorities 0-4, a quarter at 40 "
        "GiB per rank; 8 jobs of 2,048 ranks; 2 that never fit), seed "
     << seed << ".\n\n"
     << "(a) one Schedule() over the whole queue on an empty cluster, " << full_rounds
     << " rounds (fresh scheduler each). (b) steady state: " << steady.nanos.size()
     << " times release a random running job, then one Schedule() over all waiting jobs. "
        "Decisions/s = jobs considered per second of pass time; latency per pass. In (b) "
        "placements/s is bounded by the one release per pass (few jobs can start); jobs "
        "considered/s is the scheduler's speed.\n\n"
     << "| scenario | passes | jobs/pass | placed/pass | jobs considered/s | placements/s | "
        "mean ms | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  const auto row = [&](const std::string& name, const PassStats& s, const Json& j) {
    const double n = std::max<size_t>(1, s.nanos.size());
    md << "| " << name << " | " << s.nanos.size() << " | " << Fixed(s.considered / n, 0) << " | "
       << Fixed(s.placed / n, 1) << " | " << Fixed(j["considered_per_second"].get<double>(), 0)
       << " | " << Fixed(j["placements_per_second"].get<double>(), 0) << " | "
       << Fixed(j["mean_ms"].get<double>(), 2) << " | " << Fixed(j["p50_ms"].get<double>(), 2)
       << " | " << Fixed(j["p99_ms"].get<double>(), 2) << " |\n";
  };
  row("(a) full pass, empty cluster", full, full_j);
  row("(b) steady state", steady, steady_j);
  const double util_mean =
      utilisation.empty()
          ? 0
          : std::accumulate(utilisation.begin(), utilisation.end(), 0.0) / utilisation.size();
  md << "\nCounters (deterministic for a seed): full pass placed " << first.placed.size()
     << " jobs (" << full_backfilled << " backfilled) on " << full_used << " of " << cluster_slots
     << " slots; of the " << first.waiting.size() << " waiting:";
  for (const auto& [kind, count] : full_waits) md << " " << kind << " " << count << ";";
  md << " steady state placed " << steady.placed << " jobs (" << steady_backfilled
     << " backfilled), mean slot use " << Fixed(100 * util_mean, 1) << "%.\n";

  Json j;
  j["benchmark"] = "scheduler_bench";
  j["machine"] = machine;
  j["machine"]["loadavg_at_end"] = load_end;
  j["options"] = {{"nodes", nodes},
                  {"gpus_per_node", gpus},
                  {"jobs", jobs},
                  {"full_rounds", full_rounds},
                  {"steady_passes", steady_passes},
                  {"seed", seed}};
  j["queue"] = {{"jobs", jobs}, {"ranks", queued_ranks}};
  j["full_pass"] = full_j;
  j["full_pass"]["pass_ns"] = full.nanos;
  j["full_pass"]["placed_jobs"] = first.placed.size();
  j["full_pass"]["backfilled_jobs"] = full_backfilled;
  j["full_pass"]["used_slots"] = full_used;
  j["full_pass"]["waiting"] = full_waits;
  j["steady_state"] = steady_j;
  j["steady_state"]["backfilled_jobs"] = steady_backfilled;
  j["steady_state"]["mean_slot_use"] = util_mean;
  j["steady_state"]["waiting_at_end"] = last_waits;
  const std::string dir = InWorkspace(out_dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/scheduler.md") << md.str();
  std::ofstream(dir + "/scheduler.json") << j.dump(2) << "\n";
  std::cout << md.str();
  return 0;
}
