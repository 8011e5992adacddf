// rendezvous_bench: one large job's rendezvous against real dhp-controller processes over gRPC.
// N ranks ask for rank 0's key at once (KvGet, as every rank but 0 does for the NCCL unique id
// or rank 0's address), the calls wait, then rank 0 sets the key.
//
//   bazel run //bench:rendezvous_bench -- --controller old:/tmp/old/dhp-controller
//       --controller new:bazel-bin/controller/dhp-controller --ranks 10000 --ranks 80000
//
// Per controller and N, with a fresh controller each: how many calls were refused while
// waiting (and with what), the controller's threads and RSS before and while N calls wait,
// the time from the KvSet to the last answer, how many answers carried the value, and the
// controller's CPU for the whole rendezvous. The ranks are this one process: callback-API
// calls over --channels HTTP/2 connections. Writes <out-dir>/rendezvous.md and .json.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/bench_util.h"
#include "bench/controller_process.h"
#include "dhp/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"

namespace dhp::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr char kSpec[] =
    "name: rendezvous\nmodel: {preset: tiny}\ntraining: {max_steps: 10}\n"
    "data: {datasets: [s], registry: {s: {annotation_path: a.jsonl}}}\n";

struct Rank {
  grpc::ClientContext ctx;
  v1::KvGetRequest req;
  v1::KvGetResponse resp;
  grpc::Status status;
  Clock::time_point answered;
  std::atomic<bool> done{false};
};

int64_t RssKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      status >> kib;
      return kib;
    }
  }
  return -1;
}

size_t CountDone(const std::vector<std::unique_ptr<Rank>>& ranks) {
  size_t n = 0;
  for (const auto& r : ranks) n += r->done ? 1 : 0;
  return n;
}

// One rendezvous of `n` ranks against a fresh controller.
json RunCase(const std::string& label, const std::string& binary, int n, int channels) {
  json row{{"controller", label}, {"ranks", n}};
  auto proc = ControllerProcess::Start(binary);
  if (!proc.ok()) {
    row["error"] = std::string(proc.status().message());
    return row;
  }
  const std::string target = "127.0.0.1:" + std::to_string((*proc)->grpc_port());
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("dhp.bench.channel", i);  // distinct connections
    stubs.push_back(v1::WorkerService::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  auto jobs = v1::JobService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext submit_ctx;
  v1::SubmitJobRequest submit;
  submit.set_spec_text(kSpec);
  v1::SubmitJobResponse submitted;
  if (grpc::Status s = jobs->SubmitJob(&submit_ctx, submit, &submitted); !s.ok()) {
    row["error"] = "SubmitJob: " + s.error_message();
    return row;
  }
  v1::KvScope scope;
  scope.set_job_id(submitted.job().id());
  scope.set_attempt(1);

  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int threads_before = (*proc)->ThreadCount();
  const int64_t rss_before = RssKiB((*proc)->pid());
  const double cpu_before = (*proc)->CpuSeconds();
  const Clock::time_point start = Clock::now();
  std::vector<std::unique_ptr<Rank>> ranks;
  ranks.reserve(n);
  for (int i = 0; i < n; ++i) {
    auto rank = std::make_unique<Rank>();
    Rank* r = rank.get();
    *r->req.mutable_scope() = scope;
    r->req.set_key("rank0/nccl_unique_id");
    r->req.set_timeout_ms(120000);
    r->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(180));
    stubs[i % channels]->async()->KvGet(&r->ctx, &r->req, &r->resp, [r](grpc::Status s) {
      r->status = std::move(s);
      r->answered = Clock::now();
      r->done = true;
    });
    ranks.push_back(std::move(rank));
  }
  const double issue_s = std::chrono::duration<double>(Clock::now() - start).count();
  // Let every call arrive and settle (refusals come back at once), sampling the controller.
  int threads_peak = threads_before;
  int64_t rss_peak = rss_before;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    threads_peak = std::max(threads_peak, (*proc)->ThreadCount());
    rss_peak = std::max(rss_peak, RssKiB((*proc)->pid()));
  }
  std::map<std::string, int> refused;
  for (const auto& r : ranks) {
    if (r->done) ++refused[std::to_string(r->status.error_code())];
  }
  const size_t early = CountDone(ranks);

  grpc::ClientContext set_ctx;
  v1::KvSetRequest set;
  *set.mutable_scope() = scope;
  set.set_key("rank0/nccl_unique_id");
  set.set_value(std::string(128, 'u'));  // ncclUniqueId is 128 bytes
  v1::KvSetResponse set_resp;
  const Clock::time_point set_at = Clock::now();
  grpc::Status set_status = stubs[0]->KvSet(&set_ctx, set, &set_resp);
  while (CountDone(ranks) < ranks.size() && Clock::now() - set_at < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<int64_t> after_set_ns;
  int with_value = 0;
  for (const auto& r : ranks) {
    if (!r->done || r->answered < set_at) continue;
    after_set_ns.push_back((r->answered - set_at).count());
    if (r->status.ok() && r->resp.value() == set.value()) ++with_value;
  }
  std::sort(after_set_ns.begin(), after_set_ns.end());
  const double cpu_s = (*proc)->CpuSeconds() - cpu_before;
  row["issue_s"] = issue_s;
  row["refused_while_waiting"] = early;
  row["refused_by_code"] = refused;
  row["threads_before"] = threads_before;
  row["threads_peak_waiting"] = threads_peak;
  row["rss_before_mib"] = rss_before / 1024.0;
  row["rss_peak_waiting_mib"] = rss_peak / 1024.0;
  row["set_ok"] = set_status.ok();
  row["answered_after_set"] = after_set_ns.size();
  row["with_value"] = with_value;
  row["after_set_p50_ms"] = PercentileMs(after_set_ns, 0.5);
  row["after_set_max_ms"] = PercentileMs(after_set_ns, 1.0);
  row["unanswered"] = ranks.size() - CountDone(ranks);
  row["controller_cpu_s"] = cpu_s;
  for (auto& r : ranks) r->ctx.TryCancel();  // any still waiting (none when it worked)
  while (CountDone(ranks) < ranks.size()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  (*proc)->Stop();
  return row;
}

std::string Table(const json& rows) {
  std::string md =
      "| controller | ranks | refused while waiting (code: count) | controller threads before / "
      "peak while waiting | RSS MiB before / peak while waiting | KvSet to last answer ms (p50 / "
      "max) | answered with the value | controller CPU s (µs per rank) |\n"
      "|---|---:|---|---:|---:|---:|---:|---:|\n";
  for (const json& r : rows) {
    if (r.contains("error")) {
      md += "| " + r["controller"].get<std::string>() + " | " + std::to_string(r["ranks"].get<int>()) +
            " | error: " + r["error"].get<std::string>() + " | | | | | |\n";
      continue;
    }
    std::string codes;
    for (const auto& [code, count] : r["refused_by_code"].items()) {
      codes += (codes.empty() ? "" : ", ") + code + ": " + std::to_string(count.get<int>());
    }
    const int ranks = r["ranks"].get<int>();
    md += "| " + r["controller"].get<std::string>() + " | " + std::to_string(ranks) + " | " +
          std::to_string(r["refused_while_waiting"].get<size_t>()) +
          (codes.empty() ? "" : " (" + codes + ")") + " | " +
          std::to_string(r["threads_before"].get<int>()) + " / " +
          std::to_string(r["threads_peak_waiting"].get<int>()) + " | " +
          Fixed(r["rss_before_mib"].get<double>(), 0) + " / " +
          Fixed(r["rss_peak_waiting_mib"].get<double>(), 0) + " | " +
          Fixed(r["after_set_p50_ms"].get<double>(), 0) + " / " +
          Fixed(r["after_set_max_ms"].get<double>(), 0) + " | " +
          std::to_string(r["with_value"].get<int>()) + " | " +
          Fixed(r["controller_cpu_s"].get<double>(), 2) + " (" +
          Fixed(r["controller_cpu_s"].get<double>() * 1e6 / ranks, 0) + ") |\n";
  }
  return md;
}

}  // namespace
}  // namespace dhp::bench

int main(int argc, char** argv) {
  using namespace dhp::bench;
  CLI::App app("rendezvous_bench: N ranks wait for rank 0's key on a real dhp-controller");
  std::vector<std::string> controllers;
  std::vector<int> ranks;
  int channels = 8;
  std::string out_dir = "bench/results";
  app.add_option("--controller", controllers, "label:path of a dhp-controller binary (repeat)")
      ->required();
  app.add_option("--ranks", ranks, "ranks waiting at once (repeat; default 10000 and 80000)");
  app.add_option("--channels", channels, "HTTP/2 connections the ranks share")->check(CLI::Range(1, 256));
  app.add_option("--out-dir", out_dir, "where rendezvous.md and .json go");
  if (!dhp::bench::ArgsAreUtf8(argc, argv)) return 2;
  CLI11_PARSE(app, argc, argv);
  if (ranks.empty()) ranks = {10000, 80000};
  nlohmann::json rows = nlohmann::json::array();
  for (int n : ranks) {
    for (const std::string& c : controllers) {
      const size_t colon = c.find(':');
      const std::string label = colon == std::string::npos ? c : c.substr(0, colon);
      const std::string path = colon == std::string::npos ? c : c.substr(colon + 1);
      std::cerr << "rendezvous_bench: " << label << ", " << n << " ranks\n";
      rows.push_back(RunCase(label, path, n, channels));
      std::cerr << rows.back().dump() << "\n";
    }
  }
  const nlohmann::json machine = MachineInfo();
  const std::string md =
      "## rendezvous_bench: N ranks wait for rank 0's key (KvGet), then it is set\n\n" +
      machine["date_utc"].get<std::string>() + ", " + machine["hostname"].get<std::string>() +
      ", " + std::to_string(machine["nproc"].get<int>()) + " CPUs (" +
      machine["cpu_model"].get<std::string>() + "), load average " +
      machine["loadavg_at_start"].get<std::string>() + " at the end; " +
      std::to_string(channels) + " HTTP/2 connections for all ranks, each KvGet with " +
      "timeout_ms 120000; the ranks are this process (callback API).\n\n" + Table(rows);
  std::cout << md;
  std::filesystem::create_directories(out_dir);
  std::ofstream(out_dir + "/rendezvous.md") << md;
  std::ofstream(out_dir + "/rendezvous.json")
      << nlohmann::json{{"machine", machine}, {"rows", rows}}.dump(2);
  return 0;
}
