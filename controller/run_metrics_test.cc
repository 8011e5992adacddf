#include "controller/run_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>

#include "common/clock.h"
#include "controller/job_manager.h"

namespace dhp::controller {
namespace {

constexpr int64_t kNow = 1'700'000'100'000'000;

std::optional<double> Find(const MetricRows& rows, const std::string& family,
                           const std::vector<std::string>& labels) {
  auto it = rows.find(family);
  if (it == rows.end()) return std::nullopt;
  for (const auto& [l, v] : it->second) {
    if (l == labels) return v;
  }
  return std::nullopt;
}

size_t Count(const MetricRows& rows, const std::string& family) {
  auto it = rows.find(family);
  return it == rows.end() ? 0 : it->second.size();
}

v1::Node CpuNode(const std::string& id, int slots, int64_t memory) {
  v1::Node n;
  n.set_id(id);
  n.set_state(v1::NODE_STATE_READY);
  n.mutable_resources()->set_cpu_slots(slots);
  n.mutable_resources()->set_memory_bytes(memory);
  return n;
}

// Vision 1 x text 2, collocated: rank 0 hosts vision and text, rank 1 text only.
v1::Job RunningJob(const std::string& id) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_current_attempt(2);
  job.set_restart_count(1);
  job.set_latest_step(7);
  job.set_latest_loss(3.5);
  job.set_total_steps(100);
  job.mutable_spec()->mutable_vision()->set_degree(1);
  job.mutable_spec()->mutable_text()->set_degree(2);
  job.mutable_spec()->set_data_parallel_size(1);
  return job;
}

ActiveRun PlacedRun(const std::string& job_id, int attempt, const std::string& node) {
  ActiveRun run;
  run.id = RunId{job_id, attempt};
  for (int w = 0; w < 2; ++w) {
    v1::RankPlacement p;
    p.set_world_rank(w);
    p.set_node_id(node);
    p.set_slot(w);
    run.placement.push_back(p);
  }
  run.ranks.resize(2);
  run.job_state = v1::JOB_STATE_RUNNING;
  run.start_step = 5;
  run.max_step = 8;
  run.loss = 3.25;
  run.total_steps = 100;
  run.tokens_per_second = 1500;
  run.step_seconds = 0.5;
  run.last_advance_micros = kNow - 4'000'000;
  return run;
}

TEST(RunMetricsTest, JobStageAndClusterRowsOfAPlacedRun) {
  ActiveRun run = PlacedRun("j-1", 2, "node-a");
  RankView& r0 = run.ranks[0];
  r0.step = 8;
  r0.report_micros = kNow - 1'500'000;
  r0.metrics = {{"vision_tokens_per_s", 400},      {"text_tokens_per_s", 1200},
                {"forward_s", 0.1},                {"backward_s", 0.2},
                {"comm_s", 0.05},                  {"optimizer_s", 0.02},
                {"text_forward_s", 0.07},          {"memory_rss_bytes", 3e8},
                {"lr", 1e-3},                      {"grad_norm", 0.75},
                {"comm_bytes:text.tp0", 123456},   {"comm_bytes:vision.sp0", 0},
                {"memory_peak_bytes", NAN},        {"vision_backward_s", NAN}};
  RankView& r1 = run.ranks[1];
  r1.step = 7;
  r1.report_micros = kNow - 500'000;
  r1.metrics = {{"text_tokens_per_s", 1100}, {"forward_s", 0.3}, {"mfu_text", 0.4},
                {"learning_rate", 5.0}, {"comm_bytes:text.tp0", 654321}};

  // Attempt 1 of the same job, still draining: counted in node slots, no rank rows.
  ActiveRun old = PlacedRun("j-1", 1, "node-b");
  old.draining = true;
  old.ranks[0].report_micros = kNow;
  old.ranks[0].metrics = {{"vision_tokens_per_s", 999}};

  RunMetricsInput in;
  in.runs = {&old, &run};
  in.jobs["j-1"].job = RunningJob("j-1");
  v1::Run current;
  current.set_attempt(2);
  current.set_queue_wait_seconds(12.5);
  *current.add_placement() = run.placement[0];
  in.jobs["j-1"].current_run = current;
  v1::Checkpoint ckpt;
  ckpt.set_step(5);
  ckpt.set_write_seconds(1.25);
  ckpt.set_size_bytes(4096);
  ckpt.set_state(v1::CHECKPOINT_STATE_COMPLETE);
  in.jobs["j-1"].checkpoint = ckpt;
  in.nodes = {CpuNode("node-a", 4, 8'000'000'000), CpuNode("node-b", 2, 0)};
  v1::Node gpu_node;
  gpu_node.set_id("node-g");
  v1::Gpu* gpu = gpu_node.mutable_resources()->add_gpus();
  gpu->set_index(0);
  gpu->set_memory_bytes(80'000'000'000);
  in.nodes.push_back(gpu_node);
  in.slots.total = 7;
  in.slots.used = 4;
  in.slots.free = 3;
  in.slots.queued_jobs = 2;

  const MetricRows rows = ComputeRunMetrics(in);

  EXPECT_EQ(Find(rows, "dhp_job_step", {"j-1"}), 8);
  EXPECT_EQ(Find(rows, "dhp_job_total_steps", {"j-1"}), 100);
  EXPECT_EQ(Find(rows, "dhp_job_loss", {"j-1"}), 3.25);
  EXPECT_EQ(Find(rows, "dhp_job_learning_rate", {"j-1"}), 1e-3);  // the lowest rank's
  EXPECT_EQ(Find(rows, "dhp_job_grad_norm", {"j-1"}), 0.75);
  EXPECT_EQ(Find(rows, "dhp_job_restarts", {"j-1"}), 1);
  EXPECT_EQ(Find(rows, "dhp_job_queue_wait_seconds", {"j-1"}), 12.5);
  EXPECT_EQ(Find(rows, "dhp_job_tokens_per_second", {"j-1"}), 1500);
  EXPECT_EQ(Find(rows, "dhp_job_step_seconds", {"j-1"}), 0.5);
  EXPECT_EQ(Find(rows, "dhp_job_state", {"j-1", "RUNNING"}), 1);
  EXPECT_EQ(Count(rows, "dhp_job_state"), 1u);
  EXPECT_EQ(Find(rows, "dhp_job_last_progress_timestamp_seconds", {"j-1"}), (kNow - 4e6) / 1e6);

  // Rank 0 hosts both stages, rank 1 only text.
  EXPECT_EQ(Find(rows, "dhp_stage_tokens_per_second", {"j-1", "vision", "0"}), 400);
  EXPECT_EQ(Find(rows, "dhp_stage_tokens_per_second", {"j-1", "text", "0"}), 1200);
  EXPECT_EQ(Find(rows, "dhp_stage_tokens_per_second", {"j-1", "text", "1"}), 1100);
  EXPECT_EQ(Find(rows, "dhp_stage_tokens_per_second", {"j-1", "vision", "1"}), std::nullopt);
  EXPECT_EQ(Count(rows, "dhp_stage_tokens_per_second"), 3u);  // not the draining run's
  EXPECT_EQ(Find(rows, "dhp_stage_step_seconds", {"j-1", "vision", "0", "forward"}), 0.1);
  EXPECT_EQ(Find(rows, "dhp_stage_step_seconds", {"j-1", "text", "0", "forward"}), 0.07);
  EXPECT_EQ(Find(rows, "dhp_stage_step_seconds", {"j-1", "text", "0", "backward"}), 0.2);
  // A stage's own key that is not a number: the process-wide one.
  EXPECT_EQ(Find(rows, "dhp_stage_step_seconds", {"j-1", "vision", "0", "backward"}), 0.2);
  EXPECT_EQ(Find(rows, "dhp_stage_step_seconds", {"j-1", "vision", "0", "comm"}), 0.05);
  EXPECT_EQ(Find(rows, "dhp_stage_step_seconds", {"j-1", "text", "0", "optimizer"}), 0.02);
  EXPECT_EQ(Find(rows, "dhp_stage_step_seconds", {"j-1", "text", "1", "forward"}), 0.3);
  EXPECT_EQ(Count(rows, "dhp_stage_step_seconds"), 9u);
  EXPECT_EQ(Find(rows, "dhp_stage_memory_bytes", {"j-1", "vision", "0", "rss"}), 3e8);
  EXPECT_EQ(Find(rows, "dhp_stage_memory_bytes", {"j-1", "text", "0", "rss"}), 3e8);
  EXPECT_EQ(Count(rows, "dhp_stage_memory_bytes"), 2u);  // NaN peak left out
  EXPECT_EQ(Find(rows, "dhp_stage_mfu", {"j-1", "text", "1"}), 0.4);
  EXPECT_EQ(Count(rows, "dhp_stage_mfu"), 1u);
  EXPECT_EQ(Find(rows, "dhp_collective_bytes", {"j-1", "0", "text.tp0"}), 123456);
  EXPECT_EQ(Find(rows, "dhp_collective_bytes", {"j-1", "0", "vision.sp0"}), 0);
  EXPECT_EQ(Find(rows, "dhp_collective_bytes", {"j-1", "1", "text.tp0"}), 654321);
  ASSERT_EQ(Count(rows, "dhp_collective_bytes"), 3u);  // by rank, then group: the same each scrape
  EXPECT_EQ(rows.at("dhp_collective_bytes")[1].first,
            (std::vector<std::string>{"j-1", "0", "vision.sp0"}));
  EXPECT_EQ(Find(rows, "dhp_rank_step", {"j-1", "1"}), 7);
  EXPECT_EQ(Find(rows, "dhp_rank_last_report_timestamp_seconds", {"j-1", "0"}),
            (kNow - 1.5e6) / 1e6);
  EXPECT_EQ(Find(rows, "dhp_rank_memory_capacity_bytes", {"j-1", "1"}), 2e9);

  EXPECT_EQ(Find(rows, "dhp_checkpoint_step", {"j-1"}), 5);
  EXPECT_EQ(Find(rows, "dhp_checkpoint_write_seconds", {"j-1"}), 1.25);
  EXPECT_EQ(Find(rows, "dhp_checkpoint_size_bytes", {"j-1"}), 4096);

  EXPECT_EQ(Find(rows, "dhp_slots", {"total"}), 7);
  EXPECT_EQ(Find(rows, "dhp_slots", {"used"}), 4);
  EXPECT_EQ(Find(rows, "dhp_slots", {"free"}), 3);
  EXPECT_EQ(Find(rows, "dhp_queued_jobs", {}), 2);
  EXPECT_EQ(Find(rows, "dhp_node_slots", {"node-a", "total"}), 4);
  EXPECT_EQ(Find(rows, "dhp_node_slots", {"node-a", "used"}), 2);
  EXPECT_EQ(Find(rows, "dhp_node_slots", {"node-b", "used"}), 2);  // held while draining
  EXPECT_EQ(Find(rows, "dhp_node_slots", {"node-g", "total"}), 1);
  EXPECT_EQ(Find(rows, "dhp_device_memory_bytes", {"node-a", "host"}), 8e9);
  EXPECT_EQ(Find(rows, "dhp_device_memory_bytes", {"node-g", "0"}), 8e10);
  EXPECT_EQ(Find(rows, "dhp_device_memory_bytes", {"node-b", "host"}), std::nullopt);

  // The stages over their ranks: rank 0 hosts both, rank 1 text only.
  EXPECT_EQ(Find(rows, "dhp_job_stage_tokens_per_second", {"j-1", "vision"}), 400);
  EXPECT_EQ(Find(rows, "dhp_job_stage_tokens_per_second", {"j-1", "text"}), 1200);  // highest
  EXPECT_EQ(Find(rows, "dhp_job_stage_step_seconds", {"j-1", "vision", "forward"}), 0.1);
  EXPECT_EQ(Find(rows, "dhp_job_stage_step_seconds", {"j-1", "text", "forward"}), 0.3);
  EXPECT_EQ(Find(rows, "dhp_job_stage_step_seconds", {"j-1", "text", "optimizer"}), 0.02);
  EXPECT_EQ(Count(rows, "dhp_job_stage_step_seconds"), 8u);
  EXPECT_EQ(Find(rows, "dhp_job_stage_memory_bytes", {"j-1", "text", "rss"}), 3e8);
  EXPECT_EQ(Count(rows, "dhp_job_stage_memory_bytes"), 2u);  // rss of each stage; NaN peak out
  EXPECT_EQ(Find(rows, "dhp_job_stage_mfu", {"j-1", "text"}), 0.4);  // only rank 1 reports it
  EXPECT_EQ(Count(rows, "dhp_job_stage_mfu"), 1u);
  EXPECT_EQ(Find(rows, "dhp_job_memory_used_ratio", {"j-1"}), 3e8 / 2e9);  // rank 0: rss / slot
  EXPECT_EQ(Find(rows, "dhp_metrics_rank_series", {}), 1);

  // Without per-rank series: the same rows but the per-rank families'.
  in.rank_series = false;
  const MetricRows summary = ComputeRunMetrics(in);
  const std::vector<std::string> per_rank = {
      "dhp_stage_tokens_per_second", "dhp_stage_step_seconds", "dhp_stage_memory_bytes",
      "dhp_stage_mfu", "dhp_collective_bytes", "dhp_rank_step",
      "dhp_rank_last_report_timestamp_seconds", "dhp_rank_memory_capacity_bytes"};
  for (const auto& [family, family_rows] : rows) {
    const bool rank_family =
        std::find(per_rank.begin(), per_rank.end(), family) != per_rank.end();
    if (rank_family || family == "dhp_metrics_rank_series") continue;
    EXPECT_EQ(summary.at(family), family_rows) << family;
  }
  for (const std::string& family : per_rank) {
    EXPECT_GT(Count(rows, family), 0u) << family;
    EXPECT_EQ(Count(summary, family), 0u) << family;
  }
  EXPECT_EQ(Find(summary, "dhp_metrics_rank_series", {}), 0);
  in.rank_series = true;

  // The scrape's path writes the same rows as text as they come, in the same order.
  MetricsExposition from_rows, from_writer;
  RunMetrics(from_rows).Set(rows);
  RunMetrics written(from_writer);
  GaugeTextWriter text = written.Writer();
  RunMetricsBuilder builder(in.nodes, text);
  builder.AddRuns(in.runs, in.jobs);
  builder.Finish(in.slots);
  written.Set(std::move(text));
  const std::string rendered = from_writer.RenderText();
  EXPECT_EQ(rendered, from_rows.RenderText());
  for (const char* line :
       {"dhp_stage_step_seconds{job=\"j-1\",stage=\"vision\",rank=\"0\",phase=\"forward\"} 0.1\n",
        "dhp_stage_memory_bytes{job=\"j-1\",stage=\"vision\",rank=\"0\",kind=\"rss\"} 300000000\n",
        "dhp_collective_bytes{job=\"j-1\",rank=\"1\",group=\"text.tp0\"} 654321\n",
        "dhp_rank_memory_capacity_bytes{job=\"j-1\",rank=\"1\"} 2000000000\n",
        "dhp_node_slots{node=\"node-b\",kind=\"used\"} 2\n",
        "dhp_device_memory_bytes{node=\"node-g\",device=\"0\"} 80000000000\n"}) {
    EXPECT_NE(rendered.find(line), std::string::npos) << line << rendered;
  }
}

TEST(RunMetricsTest, AJobWhoseRunIsDrainingKeepsJobRowsButNoRankRows) {
  ActiveRun run = PlacedRun("j-2", 1, "node-a");
  run.draining = true;
  run.ranks[0].report_micros = kNow;
  run.ranks[0].metrics = {{"text_tokens_per_s", 5}};
  v1::Job job = RunningJob("j-2");
  job.set_current_attempt(2);
  job.set_state(v1::JOB_STATE_QUEUED);  // restarting: attempt 2 waits for slots
  v1::Run waiting;  // not placed yet
  waiting.set_attempt(2);

  RunMetricsInput in;
  in.runs = {&run};
  in.jobs["j-2"].job = job;
  in.jobs["j-2"].current_run = waiting;
  const MetricRows rows = ComputeRunMetrics(in);

  EXPECT_EQ(Find(rows, "dhp_job_state", {"j-2", "QUEUED"}), 1);
  EXPECT_EQ(Find(rows, "dhp_job_step", {"j-2"}), 7);  // the job's, not the draining run's
  EXPECT_EQ(Find(rows, "dhp_job_loss", {"j-2"}), 3.5);
  EXPECT_EQ(Find(rows, "dhp_job_restarts", {"j-2"}), 1);
  EXPECT_EQ(Count(rows, "dhp_job_queue_wait_seconds"), 0u);
  EXPECT_EQ(Count(rows, "dhp_job_last_progress_timestamp_seconds"), 0u);
  EXPECT_EQ(Count(rows, "dhp_stage_tokens_per_second"), 0u);
  EXPECT_EQ(Count(rows, "dhp_job_tokens_per_second"), 0u);
  EXPECT_EQ(Count(rows, "dhp_checkpoint_step"), 0u);
}

TEST(RunMetricsTest, SlicesOfRunsGiveTheRowsOfAllRunsAtOnce) {
  // Three jobs on two nodes; j-2 has a draining attempt beside its live one (same slice).
  std::vector<ActiveRun> runs = {PlacedRun("j-1", 2, "node-a"), PlacedRun("j-2", 1, "node-b"),
                                 PlacedRun("j-2", 2, "node-a"), PlacedRun("j-3", 2, "node-b")};
  runs[1].draining = true;
  for (ActiveRun& run : runs) {
    run.ranks[0].report_micros = kNow;
    run.ranks[0].metrics = {{"text_tokens_per_s", 10.0 + run.id.attempt}, {"lr", 0.5}};
  }
  RunMetricsInput in;
  for (const ActiveRun& run : runs) in.runs.push_back(&run);
  for (const char* id : {"j-1", "j-2", "j-3"}) in.jobs[id].job = RunningJob(id);
  in.jobs["j-3"].checkpoint.emplace().set_step(4);
  in.nodes = {CpuNode("node-a", 4, 8'000'000'000), CpuNode("node-b", 4, 8'000'000'000)};
  in.slots.total = 8;
  const MetricRows whole = ComputeRunMetrics(in);

  GaugeRowsCollector collector(RunMetrics::Families());
  RunMetricsBuilder builder(in.nodes, collector);
  builder.AddRuns({&runs[0]}, in.jobs);
  builder.AddRuns({&runs[1], &runs[2]}, in.jobs);
  builder.AddRuns({}, in.jobs);
  builder.AddRuns({&runs[3]}, in.jobs);
  builder.Finish(in.slots);
  const MetricRows sliced = collector.Take();
  EXPECT_EQ(sliced, whole);
  EXPECT_EQ(Count(whole, "dhp_job_state"), 3u);
  EXPECT_EQ(Find(whole, "dhp_node_slots", {"node-b", "used"}), 4);  // the draining run's too
  EXPECT_EQ(Find(whole, "dhp_checkpoint_step", {"j-3"}), 4);

  // A job whose stored row is gone (deleted between the reads) has no rows; its slots count.
  in.jobs.erase("j-1");
  const MetricRows without = ComputeRunMetrics(in);
  EXPECT_EQ(Count(without, "dhp_job_state"), 2u);
  EXPECT_FALSE(Find(without, "dhp_job_step", {"j-1"}).has_value());
  EXPECT_EQ(Find(without, "dhp_node_slots", {"node-a", "used"}), 4);
}

TEST(RunMetricsTest, NoRunsStillExportsTheClusterRows) {
  RunMetricsInput in;
  const MetricRows rows = ComputeRunMetrics(in);
  EXPECT_EQ(Find(rows, "dhp_slots", {"total"}), 0);
  EXPECT_EQ(Find(rows, "dhp_queued_jobs", {}), 0);
  EXPECT_EQ(Count(rows, "dhp_job_step"), 0u);
}

// The contract in run_metrics.h: every family is registered (so HELP/TYPE are always there)
// and every name ComputeRunMetrics produces is one of them.
TEST(RunMetricsTest, SetRendersTheFamiliesAndEmptiesTheAbsentOnes) {
  MetricsExposition exposition;
  RunMetrics metrics(exposition);
  const std::vector<std::string> names = RunMetrics::FamilyNames();
  for (const char* name : {"dhp_job_step", "dhp_job_total_steps", "dhp_job_loss",
                           "dhp_job_learning_rate", "dhp_job_grad_norm", "dhp_job_restarts",
                           "dhp_job_queue_wait_seconds", "dhp_job_tokens_per_second",
                           "dhp_job_state", "dhp_job_last_progress_timestamp_seconds",
                           "dhp_stage_tokens_per_second", "dhp_stage_step_seconds",
                           "dhp_stage_memory_bytes", "dhp_stage_mfu", "dhp_collective_bytes",
                           "dhp_checkpoint_write_seconds", "dhp_checkpoint_size_bytes",
                           "dhp_slots", "dhp_queued_jobs", "dhp_device_memory_bytes"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  MetricRows rows;
  rows["dhp_job_step"] = {{{"j-1"}, 3}};
  rows["dhp_stage_step_seconds"] = {{{"j-1", "text", "0", "forward"}, 0.25}};
  metrics.Set(rows);
  std::string text = exposition.RenderText();
  EXPECT_NE(text.find("dhp_job_step{job=\"j-1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dhp_stage_step_seconds{job=\"j-1\",stage=\"text\",rank=\"0\","
                      "phase=\"forward\"} 0.25\n"),
            std::string::npos)
      << text;
  for (const std::string& name : names) {
    EXPECT_NE(text.find("# TYPE " + name + " gauge\n"), std::string::npos) << name;
  }
  metrics.Set({});
  text = exposition.RenderText();
  EXPECT_EQ(text.find("dhp_job_step{"), std::string::npos) << text;
  EXPECT_EQ(text.find("\ndhp_queued_jobs "), std::string::npos) << text;  // emptied as well
  EXPECT_NE(text.find("# TYPE dhp_job_step gauge\n"), std::string::npos) << text;
}

TEST(RunMetricsDeathTest, AnUnknownFamilyIsAProgrammingError) {
  MetricsExposition exposition;
  RunMetrics metrics(exposition);
  MetricRows rows;
  rows["dhp_no_such_metric"] = {};
  EXPECT_DEATH(metrics.Set(rows), "unknown family dhp_no_such_metric");
  const ActiveRun a = PlacedRun("j-1", 1, "n"), b = PlacedRun("j-2", 1, "n");
  RunMetricsInput in;
  in.runs = {&b, &a};
  EXPECT_DEATH(ComputeRunMetrics(in), "runs not in job order at j-1");
}

// A real Supervisor driven like controller/supervisor_test.cc: place a job, ranks report
// progress with per-stage metrics and a checkpoint completes; the gathered rows show them, and
// the rendered exposition passes `promtool check metrics`.
class RunMetricsSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    jobs_ = std::make_unique<JobManager>(*store_, clock_, SpecOptions{"/data/ckpt"});
    sup_ = std::make_unique<Supervisor>(*store_, clock_, SupervisorOptions{"/data/ckpt"});
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<Supervisor> sup_;
};

TEST_F(RunMetricsSupervisorTest, ReportedMetricsOfAPlacedRunAreExported) {
  v1::Node node = CpuNode("n1", 2, 4'000'000'000);
  ASSERT_TRUE(store_->PutNode(node, {}).ok());
  sup_->OnNodeChanged(node);

  v1::SubmitJobRequest submit;
  submit.set_spec_text(
      "name: m\nmodel: {preset: tiny}\nvision: {parallelism: sequence, degree: 2}\n"
      "text: {parallelism: tensor, degree: 2}\ntraining: {max_steps: 10}\n"
      "checkpoint: {every_steps: 5, keep_latest: 2}\n"
      "data: {datasets: [shapes], registry: {shapes: {annotation_path: data/train.jsonl}}}\n");
  absl::StatusOr<v1::JobSpec> spec = jobs_->ValidateSubmission(submit);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::SubmitJobResponse submitted;
  std::vector<v1::Event> events;
  ASSERT_TRUE(jobs_->SubmitValidated(*spec, false, &submitted, &events).ok());
  const v1::Job job = submitted.job();
  sup_->OnJobQueued(job);

  MetricRows rows = ComputeRunMetrics(GatherRunMetricsInput(*sup_, *store_, {node}));
  EXPECT_EQ(Find(rows, "dhp_queued_jobs", {}), 1);
  EXPECT_EQ(Count(rows, "dhp_job_step"), 0u);  // queued jobs are only counted

  clock_.AdvanceMicros(2'000'000);
  ASSERT_TRUE(sup_->Schedule(&events).ok());
  v1::HeartbeatRequest beat;
  beat.set_node_id("n1");
  for (int w = 0; w < 2; ++w) {
    v1::RankStatus* st = beat.add_ranks();
    st->set_job_id(job.id());
    st->set_attempt(1);
    st->set_world_rank(w);
    st->set_state(v1::RANK_PROCESS_STATE_RUNNING);
  }
  v1::HeartbeatResponse beat_resp;
  ASSERT_TRUE(sup_->OnHeartbeat(beat, &beat_resp, &events).ok());
  for (int w = 0; w < 2; ++w) {
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_attempt(1);
    req.set_rank(w);
    req.set_step(3);
    req.set_loss(w == 0 ? 4.5 : NAN);
    req.set_total_steps(10);
    req.set_tokens_per_second(2000);
    req.set_step_seconds(0.25);
    (*req.mutable_metrics())["vision_tokens_per_s"] = 300 + w;
    (*req.mutable_metrics())["text_tokens_per_s"] = 700 + w;
    (*req.mutable_metrics())["forward_s"] = 0.1;
    (*req.mutable_metrics())["backward_s"] = 0.12;
    (*req.mutable_metrics())["comm_s"] = 0.02;
    (*req.mutable_metrics())["optimizer_s"] = 0.01;
    (*req.mutable_metrics())["memory_rss_bytes"] = 2e8;
    (*req.mutable_metrics())["lr"] = 2e-4;
    (*req.mutable_metrics())["grad_norm"] = 1.5;
    (*req.mutable_metrics())["comm_bytes:text.tp0"] = 1e6;
    v1::ReportProgressResponse resp;
    ASSERT_TRUE(sup_->OnProgress(req, &resp, &events).ok());
  }
  const v1::Run run = store_->ListRuns(job.id()).back();
  for (int w = 0; w < 2; ++w) {
    v1::ReportCheckpointRequest req;
    req.set_job_id(job.id());
    req.set_attempt(1);
    req.set_step(3);
    req.set_world_size(2);
    req.set_path(run.checkpoint_dir() + "/step-3");
    req.mutable_shard()->set_rank(w);
    req.mutable_shard()->set_file("rank-" + std::to_string(w) + ".safetensors");
    req.mutable_shard()->set_size_bytes(1000);
    req.mutable_shard()->set_crc32c("0badf00d");
    req.set_write_seconds(0.5 + w);
    v1::ReportCheckpointResponse resp;
    ASSERT_TRUE(sup_->OnCheckpointShard(req, &resp, &events).ok());
  }
  clock_.AdvanceMicros(3'000'000);

  rows = ComputeRunMetrics(GatherRunMetricsInput(*sup_, *store_, {node}));
  const std::string& id = job.id();
  EXPECT_EQ(Find(rows, "dhp_job_state", {id, "RUNNING"}), 1);
  EXPECT_EQ(Find(rows, "dhp_job_step", {id}), 3);
  EXPECT_EQ(Find(rows, "dhp_job_total_steps", {id}), 10);
  EXPECT_EQ(Find(rows, "dhp_job_loss", {id}), 4.5);
  EXPECT_EQ(Find(rows, "dhp_job_learning_rate", {id}), 2e-4);
  EXPECT_EQ(Find(rows, "dhp_job_grad_norm", {id}), 1.5);
  EXPECT_EQ(Find(rows, "dhp_job_restarts", {id}), 0);
  EXPECT_EQ(Find(rows, "dhp_job_queue_wait_seconds", {id}), 2);
  EXPECT_EQ(Find(rows, "dhp_job_tokens_per_second", {id}), 2000);
  EXPECT_EQ(Find(rows, "dhp_job_last_progress_timestamp_seconds", {id}),
            (clock_.NowMicros() - 3e6) / 1e6);
  EXPECT_EQ(Find(rows, "dhp_stage_tokens_per_second", {id, "vision", "1"}), 301);
  EXPECT_EQ(Find(rows, "dhp_stage_tokens_per_second", {id, "text", "0"}), 700);
  EXPECT_EQ(Find(rows, "dhp_stage_step_seconds", {id, "text", "1", "backward"}), 0.12);
  EXPECT_EQ(Find(rows, "dhp_stage_memory_bytes", {id, "vision", "0", "rss"}), 2e8);
  EXPECT_EQ(Find(rows, "dhp_collective_bytes", {id, "1", "text.tp0"}), 1e6);
  EXPECT_EQ(Find(rows, "dhp_rank_memory_capacity_bytes", {id, "0"}), 2e9);
  EXPECT_EQ(Find(rows, "dhp_checkpoint_step", {id}), 3);
  EXPECT_EQ(Find(rows, "dhp_checkpoint_write_seconds", {id}), 1.5);
  EXPECT_EQ(Find(rows, "dhp_checkpoint_size_bytes", {id}), 2000);
  EXPECT_EQ(Find(rows, "dhp_slots", {"used"}), 2);
  EXPECT_EQ(Find(rows, "dhp_slots", {"free"}), 0);
  EXPECT_EQ(Find(rows, "dhp_queued_jobs", {}), 0);
  EXPECT_EQ(Find(rows, "dhp_node_slots", {"n1", "used"}), 2);

  // A report's metrics replace the rank's (keys it no longer sends go); one without any keeps
  // them.
  for (bool with_metrics : {true, false}) {
    v1::ReportProgressRequest req;
    req.set_job_id(job.id());
    req.set_attempt(1);
    req.set_rank(0);
    req.set_step(4);
    if (with_metrics) (*req.mutable_metrics())["forward_s"] = 0.2;
    v1::ReportProgressResponse resp;
    ASSERT_TRUE(sup_->OnProgress(req, &resp, &events).ok());
    const MetricRows later = ComputeRunMetrics(GatherRunMetricsInput(*sup_, *store_, {node}));
    EXPECT_EQ(Find(later, "dhp_stage_step_seconds", {id, "text", "0", "forward"}), 0.2);
    EXPECT_EQ(Find(later, "dhp_stage_step_seconds", {id, "text", "0", "backward"}), std::nullopt);
    EXPECT_EQ(Find(later, "dhp_stage_tokens_per_second", {id, "vision", "0"}), std::nullopt);
    EXPECT_EQ(Find(later, "dhp_collective_bytes", {id, "0", "text.tp0"}), std::nullopt);
    EXPECT_EQ(Find(later, "dhp_collective_bytes", {id, "1", "text.tp0"}), 1e6);  // rank 1's
  }

  MetricsExposition exposition;
  RunMetrics metrics(exposition);
  metrics.Set(rows);
  const std::string text = exposition.RenderText();
  if (std::getenv("DHP_NO_PROMTOOL") != nullptr) GTEST_SKIP() << "DHP_NO_PROMTOOL is set";
  const char* promtool = "/usr/bin/promtool";
  ASSERT_EQ(access(promtool, X_OK), 0)
      << promtool << " is missing: run tools/setup.sh (or set DHP_NO_PROMTOOL=1 to skip)";
  const char* tmpdir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmpdir ? tmpdir : "/tmp") + "/run_metrics_test_" +
                           std::to_string(getpid()) + ".prom";
  {
    std::ofstream out(path);
    out << text;
  }
  FILE* pipe = popen((std::string(promtool) + " check metrics < " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int status = pclose(pipe);
  std::remove(path.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "promtool rejected the exposition:\n" << output << "\n" << text;
}

}  // namespace
}  // namespace dhp::controller
