// dhp-rank: one rank process of a controller job. The agent (dhp-worker) starts one per GPU or
// CPU slot:
//   dhp-rank --controller HOST:PORT --job J --attempt A --world-rank R --world-size W
//            --device cpu|cuda:0 --data-root DIR [--token-file F] [--tokenizer F] [--timeout S]
//            [--peak-tflops T] [--checkpoints-in-flight N]
// It asks the controller for the job (GetJob: the spec, this attempt's run, the checkpoint to
// resume from), joins the job's process groups through the controller's rendezvous KV, trains
// (job_rank.h: real data, checkpoints, resume), reports progress (rank_reporter.h) and prints
// one stdout line per step:
//   step <n>/<total> loss <%.17g or -> lr <g> grad_norm <g> tokens_per_s <g> step_s <g>
// Exit codes: 0 done (or stopped by the controller); 1 any error (stderr names the rank and, for
// a collective, the group); 2 bad usage; 3 the checkpoint to resume from was missing or corrupt
// (it was rejected with RejectCheckpoint); 75 preempted: a rank got SIGTERM and every rank
// checkpointed at the same step and stopped (preemption.h; a second SIGTERM exits 143 at once).
//   dhp-rank --build-info   prints what this binary was compiled with (LibTorch version, CUDA,
//                           NCCL, the CUDA autocast API) as key=value lines, and exits 0.
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "CLI/CLI.hpp"
#include "common/command_line.h"
#include "api/auth.h"
#include "api/client.h"
#include "api/tls.h"
#include "worker/comm/grpc_kv_client.h"
#include "worker/comm/process_groups.h"
#include "worker/model/torch_compat.h"
#include "worker/rank/device_stats.h"
#include "worker/rank/job_rank.h"
#include "worker/rank/preemption.h"
#include "worker/rank/rank_control.h"
#include "worker/rank/rank_reporter.h"

namespace dhp {
namespace {

void PrintBuildInfo() {
  std::printf("torch_version=%s\ncuda=%s\nnccl=%s\ngloo=on\ncuda_autocast_api=%s\n",
              TORCH_VERSION, BuiltWithCuda() ? "on" : "off",
              comm::BuiltWithNccl() ? "on" : "off", compat::kCudaAutocastApi);
}

int Run(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--build-info") {
      PrintBuildInfo();
      return 0;
    }
  }
  const char* env_server = std::getenv("DHP_SERVER");
  const char* env_token = std::getenv("DHP_TOKEN");
  std::string controller = env_server ? env_server : "127.0.0.1:7070";
  std::string token = env_token ? env_token : "", token_file;
  JobRankOptions o;
  int timeout_s = 300;
  CLI::App app{"dhp-rank: one rank of a dhp job, started by dhp-worker"};
  app.add_option("--controller", controller, "Controller gRPC address host:port (env DHP_SERVER)")
      ->capture_default_str();
  std::string progress_via;
  app.add_option("--progress-via", progress_via,
                 "Report progress to this address (the agent's socket, unix:PATH), which relays "
                 "it to the controller; empty: report to the controller");
  app.add_option("--job", o.job_id, "Job id")->required();
  app.add_option("--attempt", o.attempt, "Run attempt of the job")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--world-rank", o.world_rank, "This process's world rank")
      ->required()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--world-size", o.world_size, "Ranks in the job (must match its layout)")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--device", o.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--data-root", o.data_root,
                 "Relative dataset paths and model.weights_path are taken relative to this")
      ->capture_default_str();
  bool allow_any_data_path = false;
  app.add_option("--allow-data-root", o.extra_data_roots,
                 "Another directory the spec's data paths may name, besides --data-root "
                 "(repeatable)")
      ->check(CLI::ExistingDirectory);
  app.add_flag("--allow-any-data-path", allow_any_data_path,
               "Let the spec's data paths name any file this process can read");
  app.add_option("--token-file", token_file,
                 "File with the controller's API token (env DHP_TOKEN holds the token itself)");
  api::TlsClientFiles tls_files;
  api::AddTlsClientFlags(app, &tls_files);
  app.add_option("--tokenizer", o.tokenizer_path,
                 "tokenizer.json (default: <model.weights_path>/tokenizer.json, or "
                 "configs/tiny-tokenizer.json for the tiny preset)");
  app.add_option("--peak-tflops", o.peak_tflops,
                 "Dense peak TFLOP/s of the device, for MFU (default: known GPUs' BF16 peak; "
                 "none on CPU)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--build-info", "Print what this binary was compiled with, and exit");
  app.add_option("--timeout", timeout_s,
                 "Seconds for rendezvous, each collective, and retrying GetJob and "
                 "RejectCheckpoint (checkpoint reports are retried until the controller answers)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoints-in-flight", o.checkpoints_in_flight,
                 "Checkpoints written and not yet reported, at most (each holds a host copy of "
                 "the rank's state); one more waits at its step boundary")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;
  InstallPreemptionHandler();  // SIGTERM: checkpoint at the next step boundary, exit 75
  const std::string me = "rank " + std::to_string(o.world_rank);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> t = api::ReadTokenFile(token_file);
    if (!t.ok()) {
      std::fprintf(stderr, "%s: %s\n", me.c_str(), std::string(t.status().message()).c_str());
      return 2;
    }
    token = *t;
  }
  absl::StatusOr<api::TlsPems> tls = api::LoadTls(tls_files);
  if (!tls.ok()) {
    std::fprintf(stderr, "%s: %s\n", me.c_str(), std::string(tls.status().message()).c_str());
    return 2;
  }
  o.timeout = std::chrono::seconds(timeout_s);
  o.confine_data_paths = !allow_any_data_path;
  at::set_num_threads(1);  // one CPU slot per rank

  api::DhpClient client(controller, 30000, token, *tls);  // GetJob and the rendezvous KV
  // The reporter waits for an RPC in progress when it ends: a short deadline.
  api::DhpClient report_client(controller, 5000, token, *tls);
  absl::StatusOr<JobDescription> job =
      FetchJobDescription(client, o.job_id, o.attempt, o.timeout);
  if (!job.ok()) {
    std::fprintf(stderr, "%s: GetJob %s: %s\n", me.c_str(), o.job_id.c_str(),
                 job.status().ToString().c_str());
    return 1;
  }
  comm::GrpcKvClientOptions kv_options;
  kv_options.retry_for = o.timeout;  // a controller restart during bootstrap: retried this long
  comm::GrpcKvClient kv(client, o.job_id, o.attempt, kv_options);
  // The agent's socket is local: no TLS, no token (its mode keeps other users out).
  std::unique_ptr<api::DhpClient> relay_client;
  if (!progress_via.empty()) relay_client = std::make_unique<api::DhpClient>(progress_via, 5000);
  RankReporter reporter(relay_client ? *relay_client : report_client, o.job_id, o.attempt,
                        o.world_rank, RankReporter::Options{}, &report_client);
  ControllerRankControl control(report_client, reporter);
  absl::StatusOr<JobRankResult> result = RunJobRank(*job, o, kv, control);
  if (!result.ok()) {
    std::fprintf(stderr, "%s\n", result.status().ToString().c_str());
    return 1;
  }
  return ExitCodeOf(result->end);
}

}  // namespace
}  // namespace dhp

int main(int argc, char** argv) { return dhp::Run(argc, argv); }
