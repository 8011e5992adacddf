// dhpctl: the command-line client of dhp.
//
//   dhpctl submit -f spec.yaml [--follow] [--dry-run]
//   dhpctl list [--state running] [--label team=vision] [--owner alice] [--limit N]
//   dhpctl get JOB | cancel JOB [--reason R] | checkpoint JOB | watch JOB | events | nodes
//   dhpctl resume JOB [--vision-degree N] [--text-degree N] [--dp N]
//          [--placement collocate|separate] [--follow]
//   dhpctl drain NODE [--reason R] | uncordon NODE   (admins)
//   dhpctl logs JOB [--rank N]... [--attempt A] [-f|--follow]
//   dhpctl checkpoints JOB
//   dhpctl export JOB [--checkpoint ID] --out DIR [--dtype keep|fp32|bf16|fp16]
//          [--max-shard-size 5GB] [--data-root DIR] [--dhp-ckpt PATH]
//   dhpctl export JOB --on-controller [--checkpoint ID] [--dtype bf16|fp32|fp16|keep] [--wait]
//   dhpctl export-status EXPORT [--wait] | exports JOB
//   dhpctl top JOB [--interval 1s] [--once]
//   dhpctl plan -f spec.yaml [--gpu h100-80gb] [--gpus-per-node 8]
//
// --server / DHP_SERVER picks the controller (host:port of its gRPC API); -o table|json|yaml;
// --token-file / DHP_TOKEN the API token when the controller requires one.
// While following a RUNNING job (submit/resume --follow, watch) a progress line is shown
// (api/dhpctl/progress.h) and a summary is printed to stderr when the job ends.
// `top` redraws a live view of the job's ranks (api/dhpctl/top.h) until the job is final or
// Ctrl-C (exit 0); --once prints one snapshot.
// `export` resolves the checkpoint through the API and runs dhp-ckpt on it (api/dhpctl/export.h);
// it exits with dhp-ckpt's code. With --on-controller the controller writes it instead
// (ExportCheckpoint, where the checkpoint lives) into its export.root; dhpctl prints the
// export's id and, with --wait, polls it (GetExport) until it is final: exit 0 SUCCEEDED, 1
// FAILED. `export-status` shows (or waits for) one export, `exports` a job's.
// `plan` needs no controller: the memory planner's per-rank breakdown of the spec's layout and
// its alternatives against a GPU (api/dhpctl/plan.h); exit 0 when the spec's layout fits, 1 when
// it does not.
// Exit codes: 0 success; 1 the controller refused or failed the request; 2 bad usage or an
// unreadable file; 3 the controller is unreachable; with --follow, 4 when the job ends FAILED
// and 5 when it ends CANCELLED; 130 interrupted (Ctrl-C) while following or in logs -f.
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <utility>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/command_line.h"
#include "absl/strings/numbers.h"
#include "api/auth.h"
#include "api/client.h"
#include "api/dhpctl/export.h"
#include "api/dhpctl/log_lines.h"
#include "api/dhpctl/output.h"
#include "api/dhpctl/plan.h"
#include "api/dhpctl/progress.h"
#include "api/dhpctl/resume.h"
#include "api/dhpctl/top.h"
#include "api/tls.h"
#include "common/clock.h"
#include "common/proto_enum.h"
#include "common/utf8.h"

namespace dhp::dhpctl {
namespace {

struct Globals {
  std::string server;
  std::string token_file;
  api::TlsClientFiles tls;
  std::string output = "table";
  int timeout_ms = 30000;
  Format format() const {
    if (output == "json") return Format::kJson;
    if (output == "yaml") return Format::kYaml;
    return Format::kTable;
  }
};

int64_t Now() { return SystemClock().NowMicros(); }

constexpr int kInterrupted = 130;  // 128 + SIGINT, as shells report it

volatile std::sig_atomic_t g_interrupted = 0;

void OnInterrupt(int) { g_interrupted = 1; }

// Ctrl-C (and SIGTERM) set g_interrupted instead of killing the process, so that the follow
// loops can clean up (clear the progress line, print buffered lines) and exit kInterrupted.
void CatchInterrupts() {
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Sleeps up to `ms`, returning early (false) when interrupted.
bool SleepUnlessInterrupted(int ms) {
  for (int slept = 0; slept < ms && !g_interrupted; slept += 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(20, ms - slept)));
  }
  return !g_interrupted;
}

int TerminalWidth() {
  struct winsize ws = {};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

// One line a person can act on, and the exit code for it.
int Report(const absl::Status& s, const std::string& server) {
  if (s.code() == absl::StatusCode::kUnavailable) {
    std::cerr << "dhpctl: cannot reach the controller at " << server
              << " (is dhp-controller running? set --server or DHP_SERVER): " << s.message()
              << "\n";
    return 3;
  }
  std::string code = absl::StatusCodeToString(s.code());
  std::cerr << "dhpctl: " << code << ": " << s.message() << "\n";
  return 1;
}

int Print(const google::protobuf::Message& msg, const Globals& g, const std::string& table) {
  std::cout << (g.format() == Format::kTable ? table : Structured(msg, g.format()));
  if (g.format() == Format::kJson) std::cout << "\n";
  return 0;
}

int FinalExit(v1::JobState state) {
  if (state == v1::JOB_STATE_FAILED) return 4;
  if (state == v1::JOB_STATE_CANCELLED) return 5;
  return 0;
}

// Streams a job's events (from the beginning) until it is final; returns the exit code.
// In table format, polls the job (via `poll`, a client with a short deadline) twice a second
// and shows its progress line while it is RUNNING. Ends with the summary on stderr.
int Follow(api::DhpClient& client, api::DhpClient& poll, const std::string& job_id,
           const Globals& g) {
  const bool table = g.format() == Format::kTable;
  const bool tty = isatty(STDOUT_FILENO) == 1;
  ProgressConsole console(std::cout, tty, tty ? TerminalWidth() : 0);
  CatchInterrupts();

  std::mutex mu;  // guards done and watch_status
  std::condition_variable cv;
  bool done = false;
  absl::Status watch_status;
  std::thread watcher([&] {
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    req.set_follow(true);
    absl::Status s = client.WatchJob(req, [&](const v1::Event& e) {
      console.Line(table ? EventLine(e) : ProtoToJsonLine(e));
      return true;
    });
    std::lock_guard<std::mutex> lock(mu);
    watch_status = s;
    done = true;
    cv.notify_all();
  });

  v1::GetJobRequest get;
  get.set_job_id(job_id);
  auto next_poll = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return done; })) break;
    }
    if (g_interrupted) {
      // The watch call cannot be cancelled from here; leave without waiting for it.
      console.Clear();
      std::cout.flush();
      std::cerr << "dhpctl: interrupted; job " << job_id << " is not affected (dhpctl watch "
                << job_id << " follows it again)\n";
      std::_Exit(kInterrupted);
    }
    if (!table || std::chrono::steady_clock::now() < next_poll) continue;
    next_poll = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    absl::StatusOr<v1::GetJobResponse> job = poll.GetJob(get);
    if (!job.ok()) continue;  // the watch stream reports lasting trouble
    const v1::Job& j = job->job();
    if (j.state() == v1::JOB_STATE_RUNNING && (j.latest_step() > 0 || j.total_steps() > 0)) {
      console.Progress(ProgressLine(j), ProgressFraction(j), Now());
    } else {
      console.Clear();
    }
  }
  watcher.join();
  console.Clear();
  if (!watch_status.ok()) return Report(watch_status, g.server);
  absl::StatusOr<v1::GetJobResponse> job = client.GetJob(get);
  if (!job.ok()) return Report(job.status(), g.server);
  std::cerr << FinalSummary(*job);
  return FinalExit(job->job().state());
}

// `dhpctl logs`: prints a job's rank output (complete lines; "[rank N] " before each when
// several ranks are shown). With `follow`, polls every 500 ms until the attempt has ended and
// everything is printed.
int Logs(api::DhpClient& client, const std::string& job_id, const std::vector<int32_t>& ranks,
         int32_t attempt, bool follow, const Globals& g) {
  LogCursor cursor(job_id, attempt, ranks);
  if (ranks.empty()) {
    // The world size decides between "[rank N] " prefixes or none, and which ranks to ask for.
    v1::GetJobRequest get;
    get.set_job_id(job_id);
    absl::StatusOr<v1::GetJobResponse> job = client.GetJob(get);
    if (!job.ok()) return Report(job.status(), g.server);
    const int32_t want = attempt > 0 ? attempt : job->job().current_attempt();
    for (const v1::Run& run : job->runs()) {
      if (run.attempt() != want) continue;
      cursor.set_world_size(run.world_size() > 0 ? run.world_size() : run.placement_size());
    }
  }
  LineAssembler lines(cursor.MultiRank());
  CatchInterrupts();
  bool looked_again = false;  // the last look for unseen ranks once the attempt ended
  auto last_ok = std::chrono::steady_clock::now();
  for (;;) {
    if (g_interrupted) {
      std::cout << lines.Flush() << std::flush;
      return kInterrupted;
    }
    absl::StatusOr<v1::GetLogsResponse> resp = client.GetLogs(cursor.NextRequest());
    if (!resp.ok()) {
      // While following, ride out a controller restart (up to a minute).
      const absl::StatusCode code = resp.status().code();
      const bool transient = code == absl::StatusCode::kUnavailable ||
                             code == absl::StatusCode::kDeadlineExceeded;
      if (follow && transient &&
          std::chrono::steady_clock::now() - last_ok < std::chrono::minutes(1)) {
        SleepUnlessInterrupted(1000);
        continue;
      }
      std::cout << lines.Flush() << std::flush;
      return Report(resp.status(), g.server);
    }
    last_ok = std::chrono::steady_clock::now();
    std::string out;
    const LogCursor::Update update = cursor.Consume(*resp, lines, &out);
    std::cout << out << std::flush;
    if (update.full) continue;  // more is waiting
    if (!follow) break;         // everything there was when asked
    if (resp->final() && update.new_bytes == 0) {
      if (cursor.discovering() && !looked_again) {
        looked_again = true;
        cursor.DiscoverNext();
        continue;
      }
      break;
    }
    if (resp->final()) continue;  // make sure nothing remains
    SleepUnlessInterrupted(500);
  }
  std::cout << lines.Flush() << std::flush;
  return 0;
}

bool Final(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

// `dhpctl top`: GetJob every `interval_ms` and show TopView, redrawn in place on a terminal
// (clear screen + home), one snapshot after another into a pipe; -o json|yaml prints the
// GetJobResponse instead (one JSON line per snapshot when repeating). Ends after one snapshot
// with `once`, when the job is final, or on Ctrl-C (exit 0). Rides out a controller restart
// (up to a minute) while repeating.
int Top(api::DhpClient& client, const std::string& job_id, int interval_ms, bool once,
        const Globals& g) {
  const bool tty = isatty(STDOUT_FILENO) == 1;
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  if (!once) CatchInterrupts();
  auto last_ok = std::chrono::steady_clock::now();
  for (bool first = true;; first = false) {
    absl::StatusOr<v1::GetJobResponse> resp = client.GetJob(req);
    if (!resp.ok()) {
      const absl::StatusCode code = resp.status().code();
      const bool transient = code == absl::StatusCode::kUnavailable ||
                             code == absl::StatusCode::kDeadlineExceeded;
      if (once || first || !transient ||
          std::chrono::steady_clock::now() - last_ok > std::chrono::minutes(1)) {
        return Report(resp.status(), g.server);
      }
      if (!SleepUnlessInterrupted(interval_ms)) return 0;
      continue;
    }
    last_ok = std::chrono::steady_clock::now();
    if (g.format() != Format::kTable) {
      std::cout << (once ? Structured(*resp, g.format()) : ProtoToJsonLine(*resp));
      if (g.format() == Format::kJson || !once) std::cout << "\n";
    } else if (tty && !once) {
      std::cout << "\x1b[H\x1b[2J" << TopView(*resp, TerminalWidth());
    } else {
      std::cout << (first ? "" : "\n") << TopView(*resp);
    }
    std::cout.flush();
    if (once || Final(resp->job().state())) return 0;
    if (!SleepUnlessInterrupted(interval_ms)) return 0;
  }
}

// `dhpctl export`: the checkpoint from GetJob, then dhp-ckpt export --hf-dir.
int Export(api::DhpClient& client, const std::string& job_id, std::optional<int64_t> id,
           const std::string& dhp_ckpt_flag, const ExportFlags& flags, const Globals& g) {
  const char* path_env = std::getenv("PATH");
  absl::StatusOr<std::string> dhp_ckpt =
      FindDhpCkpt(dhp_ckpt_flag, SelfDir(), path_env != nullptr ? path_env : "");
  if (!dhp_ckpt.ok()) {
    std::cerr << "dhpctl: " << dhp_ckpt.status().message() << "\n";
    return 2;
  }
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  absl::StatusOr<v1::GetJobResponse> job = client.GetJob(req);
  if (!job.ok()) return Report(job.status(), g.server);
  absl::StatusOr<v1::Checkpoint> c = PickCheckpoint(*job, id);
  if (!c.ok()) return Report(c.status(), g.server);
  std::cerr << "dhpctl: exporting checkpoint " << c->id() << " (step " << c->step() << ") of job "
            << job_id << " from " << c->path() << " with " << *dhp_ckpt << "\n";
  absl::StatusOr<int> code = RunAndWait(DhpCkptArgs(*dhp_ckpt, *c, flags));
  if (!code.ok()) {
    std::cerr << "dhpctl: " << code.status().message() << "\n";
    return 2;
  }
  return *code;
}

// An export on the controller: printed as it is, or with `wait` polled every second until it
// is SUCCEEDED (exit 0) or FAILED (exit 1), the first state on stderr.
int FollowExport(api::DhpClient& client, v1::Export e, bool wait, const Globals& g) {
  if (wait && !ExportFinal(e.state())) {
    CatchInterrupts();
    std::cerr << "dhpctl: " << ExportSummary(e);
    while (!ExportFinal(e.state())) {
      if (!SleepUnlessInterrupted(1000)) return kInterrupted;
      v1::GetExportRequest req;
      req.set_id(e.id());
      absl::StatusOr<v1::GetExportResponse> resp = client.GetExport(req);
      if (!resp.ok()) return Report(resp.status(), g.server);
      e = resp->export_();
    }
  }
  v1::GetExportResponse out;
  *out.mutable_export_() = e;
  Print(out, g, ExportSummary(e));
  return ExportExit(e.state());
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path == "-" ? "/dev/stdin" : path);
  if (!in) return false;
  std::stringstream buf;
  buf << in.rdbuf();
  *out = buf.str();
  return true;
}

}  // namespace
}  // namespace dhp::dhpctl

int main(int argc, char** argv) {
  using namespace dhp;
  using namespace dhp::dhpctl;
  CLI::App app{"dhpctl: submit and manage dhp training jobs"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (-o, --server) may also follow the subcommand
  Globals g;
  const char* env = std::getenv("DHP_SERVER");
  g.server = env ? env : "127.0.0.1:7070";
  app.add_option("--server,-s", g.server, "Controller gRPC address host:port (env DHP_SERVER)")
      ->capture_default_str();
  app.add_option("--output,-o", g.output, "Output format")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();
  app.add_option("--timeout-ms", g.timeout_ms, "Deadline of each request")->capture_default_str();
  app.add_option("--token-file", g.token_file,
                 "File with the controller's API token (env DHP_TOKEN holds the token itself)");
  api::AddTlsClientFlags(app, &g.tls);

  std::string file, job_id, reason;
  bool follow = false, dry_run = false;
  std::vector<std::string> states, labels;
  int limit = 0;
  int64_t after = 0;
  std::vector<int32_t> log_ranks;
  int32_t log_attempt = 0;

  CLI::App* submit = app.add_subcommand("submit", "Submit a job spec (YAML or JSON)");
  submit->add_option("-f,--file", file, "Spec file, - for stdin")->required();
  submit->add_flag("--follow", follow, "Stream the job's events until it ends");
  submit->add_flag("--dry-run", dry_run, "Validate and show the normalised spec; store nothing");
  CLI::App* list = app.add_subcommand("list", "List jobs, newest first");
  list->add_option("--state", states, "Only jobs in this state (repeatable)");
  list->add_option("--label", labels, "Only jobs with this label key=value (repeatable)");
  list->add_option("--limit", limit, "At most this many jobs (default: all)");
  std::string owner;
  list->add_option("--owner", owner, "Only this owner's jobs (a user sees only their own)");
  CLI::App* get = app.add_subcommand("get", "Show a job with its runs and checkpoints");
  get->add_option("job", job_id, "Job id")->required();
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("job", job_id, "Job id")->required();
  cancel->add_option("--reason", reason, "Recorded with the cancellation");
  CLI::App* resume = app.add_subcommand("resume", "Resume a cancelled or failed job");
  resume->add_option("job", job_id, "Job id")->required();
  resume->add_flag("--follow", follow, "Stream the job's events until it ends");
  ResumeLayoutFlags layout;
  int32_t vision_degree = 0, text_degree = 0, dp = 0;
  CLI::Option* vision_opt = resume->add_option("--vision-degree", vision_degree,
                                               "New vision degree, for this and later runs");
  CLI::Option* text_opt = resume->add_option("--text-degree", text_degree,
                                             "New text degree, for this and later runs");
  CLI::Option* dp_opt = resume->add_option("--dp", dp,
                                           "New data_parallel_size, for this and later runs");
  resume->add_option("--placement", layout.placement,
                     "New placement, collocate or separate (as in a spec); unset flags keep "
                     "the job's layout");
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "Checkpoint a running job at its next step boundary (all ranks, one step)");
  checkpoint->add_option("job", job_id, "Job id")->required();
  CLI::App* watch = app.add_subcommand("watch", "Stream a job's events until it ends");
  watch->add_option("job", job_id, "Job id")->required();
  CLI::App* events = app.add_subcommand(
      "events", "Print the event history of one job, or of all jobs and nodes");
  events->add_option("job", job_id, "Job id (default: all jobs and nodes)");
  events->add_option("--after", after, "Only events after this id")->check(dhp::WholeNumber());
  events->add_flag("--follow", follow, "Keep streaming new events");
  CLI::App* nodes = app.add_subcommand("nodes", "List worker nodes");
  std::string node_id;
  CLI::App* drain = app.add_subcommand(
      "drain", "Cordon a node; the runs on it checkpoint at their next step and are requeued");
  drain->add_option("node", node_id, "Node id")->required();
  drain->add_option("--reason", reason, "Recorded with the drain (events, dhpctl nodes)");
  CLI::App* uncordon =
      app.add_subcommand("uncordon", "Let the scheduler place ranks on a drained node again");
  uncordon->add_option("node", node_id, "Node id")->required();
  CLI::App* logs = app.add_subcommand(
      "logs", "Print a job's rank output; several ranks' lines start \"[rank N] \"");
  logs->add_option("job", job_id, "Job id")->required();
  logs->add_option("--rank,-r", log_ranks, "Only this world rank (repeatable; default: all)");
  logs->add_option("--attempt,-a", log_attempt, "Attempt (run) number; default: the current one");
  logs->add_flag("-f,--follow", follow,
                 "Keep printing new output until the attempt ends (Ctrl-C to stop)");
  CLI::App* checkpoints = app.add_subcommand(
      "checkpoints", "List a job's checkpoints with their state, shards and write time");
  checkpoints->add_option("job", job_id, "Job id")->required();
  ExportFlags export_flags;
  std::string export_checkpoint_text;
  std::string dhp_ckpt;
  CLI::App* export_cmd = app.add_subcommand(
      "export",
      "Export a job's checkpoint as a Hugging Face model directory (runs dhp-ckpt here; the "
      "checkpoint's directory must be readable from this machine)");
  export_cmd->add_option("job", job_id, "Job id")->required();
  export_cmd->add_option("--checkpoint", export_checkpoint_text,
                         "Checkpoint ID (dhpctl checkpoints JOB); default: the newest COMPLETE");
  CLI::Option* out_opt = export_cmd->add_option(
      "--out", export_flags.out_dir,
      "The model directory to create (must not exist or be empty); required unless "
      "--on-controller");
  CLI::Option* dtype_opt =
      export_cmd
          ->add_option("--dtype", export_flags.dtype,
                       "Weights' dtype (keep: as trained; with --on-controller the default is "
                       "bf16)")
          ->check(CLI::IsMember({"keep", "fp32", "bf16", "fp16"}))
          ->capture_default_str();
  CLI::Option* shard_opt = export_cmd->add_option(
      "--max-shard-size", export_flags.max_shard_size,
      "Tensor bytes per weight file (dhp-ckpt's default: 5GB)");
  CLI::Option* data_root_opt = export_cmd->add_option(
      "--data-root", export_flags.data_root,
      "Where a relative model.weights_path starts (the agents' --data-root)");
  CLI::Option* dhp_ckpt_opt = export_cmd->add_option(
      "--dhp-ckpt", dhp_ckpt, "The dhp-ckpt binary (default: next to dhpctl, else on PATH)");
  bool on_controller = false, export_wait = false;
  export_cmd->add_flag("--on-controller", on_controller,
                       "Let the controller write the export into its export.root, where the "
                       "checkpoint lives (ExportCheckpoint); prints the export's id");
  export_cmd->add_flag("--wait", export_wait,
                       "With --on-controller: wait until the export is done (exit 0 when it "
                       "SUCCEEDED, 1 when it FAILED)");
  std::string export_id;
  CLI::App* export_status = app.add_subcommand(
      "export-status", "Show an export made with dhpctl export --on-controller");
  export_status->add_option("export", export_id, "Export id (x-...)")->required();
  export_status->add_flag("--wait", export_wait,
                          "Wait until it is done (exit 0 when it SUCCEEDED, 1 when it FAILED)");
  CLI::App* exports_cmd = app.add_subcommand(
      "exports", "List a job's exports made on the controller, newest first");
  exports_cmd->add_option("job", job_id, "Job id")->required();
  std::string top_interval = "1s";
  bool top_once = false;
  CLI::App* top = app.add_subcommand(
      "top", "Live view of a job: step, loss, throughput, and per rank its step time split, "
             "memory and what it waits on");
  top->add_option("job", job_id, "Job id")->required();
  top->add_option("--interval,-n", top_interval, "Refresh interval: 1s, 500ms, 2 (seconds)")
      ->capture_default_str();
  top->add_flag("--once", top_once, "Print one snapshot and exit");
  PlanRequest plan_req;
  CLI::App* plan = app.add_subcommand(
      "plan", "Estimate a spec's memory per GPU, for its layout and the alternatives on as many "
              "GPUs, and whether each fits a GPU model (offline: no controller)");
  plan->add_option("-f,--file", file, "Spec file, - for stdin")->required();
  plan->add_option("--gpu", plan_req.gpu,
                   "GPU model: h100-80gb, h200-141gb, a100-40gb, a100-80gb, l40s-48gb")
      ->capture_default_str();
  plan->add_option("--gpus-per-node", plan_req.gpus_per_node,
                   "GPUs per node: a tensor-parallel group must fit one node")
      ->capture_default_str();

  if (std::optional<int> exit = dhp::ParseCommandLine(app, argc, argv)) return *exit;
  // Ids and reasons travel in proto strings, which gRPC cannot send unless they are UTF-8.
  for (const auto& [what, text] : {std::pair<const char*, const std::string*>{"job id", &job_id},
                                   {"node id", &node_id},
                                   {"export id", &export_id},
                                   {"--reason", &reason}}) {
    if (const std::string bad = Utf8Error(*text); !bad.empty()) {
      std::cerr << "dhpctl: " << what << ": " << bad << "\n";
      return 2;
    }
  }
  int64_t export_checkpoint = -1;  // none named: the newest COMPLETE
  if (!export_checkpoint_text.empty() &&
      (!absl::SimpleAtoi(export_checkpoint_text, &export_checkpoint) || export_checkpoint < 1)) {
    std::cerr << "dhpctl: --checkpoint " << EscapeInvalidUtf8(export_checkpoint_text.substr(0, 40))
              << ": not a checkpoint id (a positive integer; dhpctl checkpoints JOB lists them)\n";
    return 2;
  }

  if (plan->parsed()) {  // offline: before any credential or connection
    if (g.format() != Format::kTable) {
      std::cerr << "dhpctl: plan prints tables only; drop -o " << g.output << "\n";
      return 2;
    }
    plan_req.source = file;
    if (!ReadFile(file, &plan_req.spec_text)) {
      std::cerr << "dhpctl: cannot read spec file " << file << "\n";
      return 2;
    }
    const PlanResult result = RunPlan(plan_req);
    std::cout << result.out;
    std::cerr << result.err;
    return result.exit_code;
  }

  const char* env_token = std::getenv("DHP_TOKEN");
  std::string token = env_token ? env_token : "";
  if (!g.token_file.empty()) {
    absl::StatusOr<std::string> t = api::ReadTokenFile(g.token_file);
    if (!t.ok()) {
      std::cerr << "dhpctl: " << t.status().message() << "\n";
      return 2;
    }
    token = *t;
  }
  absl::StatusOr<api::TlsPems> tls = api::LoadTls(g.tls);
  if (!tls.ok()) {
    std::cerr << "dhpctl: " << tls.status().message() << "\n";
    return 2;
  }
  api::DhpClient client(g.server, g.timeout_ms, token, *tls);
  // For the progress polls of the follow commands: a stuck call must not freeze the display.
  api::DhpClient poll_client(g.server, std::min(g.timeout_ms, 2000), token, *tls);

  if (submit->parsed()) {
    v1::SubmitJobRequest req;
    if (!ReadFile(file, req.mutable_spec_text())) {
      std::cerr << "dhpctl: cannot read spec file " << file << "\n";
      return 2;
    }
    if (const std::string bad = Utf8Error(req.spec_text()); !bad.empty()) {
      std::cerr << "dhpctl: " << file << ": " << bad << "\n";  // gRPC could not send it
      return 2;
    }
    req.set_dry_run(dry_run);
    absl::StatusOr<v1::SubmitJobResponse> resp = client.SubmitJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    if (dry_run) {
      std::cout << (g.format() == Format::kJson ? Structured(resp->job().spec(), Format::kJson)
                                                : Structured(resp->job().spec(), Format::kYaml));
      return 0;
    }
    Print(*resp, g, "job " + resp->job().id() + " submitted (" +
                        ShortName(resp->job().state()) + ")\n");
    return follow ? Follow(client, poll_client, resp->job().id(), g) : 0;
  }
  if (list->parsed()) {
    v1::ListJobsRequest req;
    for (const std::string& s : states) {
      std::optional<int> v = ParseEnumName(v1::JobState_descriptor(), s);
      if (!v || *v == 0) {
        std::cerr << "dhpctl: --state " << s << " is not a job state; use one of "
                  << EnumChoices(v1::JobState_descriptor()) << "\n";
        return 2;
      }
      req.add_states(static_cast<v1::JobState>(*v));
    }
    for (const std::string& l : labels) {
      size_t eq = l.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "dhpctl: --label " << l << " must look like key=value\n";
        return 2;
      }
      (*req.mutable_labels())[l.substr(0, eq)] = l.substr(eq + 1);
    }
    req.set_owner(owner);
    v1::ListJobsResponse all;
    do {
      req.set_page_size(limit > 0 ? std::min(1000, limit - all.jobs_size()) : 500);
      absl::StatusOr<v1::ListJobsResponse> page = client.ListJobs(req);
      if (!page.ok()) return Report(page.status(), g.server);
      for (const v1::Job& j : page->jobs()) *all.add_jobs() = j;
      req.set_page_token(page->next_page_token());
    } while (!req.page_token().empty() && (limit <= 0 || all.jobs_size() < limit));
    std::vector<v1::Job> jobs(all.jobs().begin(), all.jobs().end());
    return Print(all, g, JobsTable(jobs, Now()));
  }
  if (get->parsed()) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    absl::StatusOr<v1::GetJobResponse> resp = client.GetJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return Print(*resp, g, JobDetail(*resp, Now()));
  }
  if (cancel->parsed()) {
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    req.set_reason(reason);
    absl::StatusOr<v1::CancelJobResponse> resp = client.CancelJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return Print(*resp, g, "job " + job_id + " " + ShortName(resp->job().state()) + "\n");
  }
  if (resume->parsed()) {
    if (vision_opt->count() > 0) layout.vision_degree = vision_degree;
    if (text_opt->count() > 0) layout.text_degree = text_degree;
    if (dp_opt->count() > 0) layout.data_parallel_size = dp;
    absl::StatusOr<v1::ResumeJobRequest> req = ResumeRequest(job_id, layout);
    if (!req.ok()) {
      std::cerr << "dhpctl: " << req.status().message() << "\n";
      return 2;
    }
    absl::StatusOr<v1::ResumeJobResponse> resp = client.ResumeJob(*req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    Print(*resp, g, "job " + job_id + " " + ShortName(resp->job().state()) + " as attempt " +
                        std::to_string(resp->run().attempt()) + ": " + resp->job().message() +
                        "\n");
    return follow ? Follow(client, poll_client, job_id, g) : 0;
  }
  if (checkpoint->parsed()) {
    v1::CheckpointJobRequest req;
    req.set_job_id(job_id);
    absl::StatusOr<v1::CheckpointJobResponse> resp = client.CheckpointJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return Print(*resp, g,
                 "job " + job_id + ": checkpoint requested; the ranks write it at step " +
                     std::to_string(resp->at_step()) + " or the first step boundary after it\n");
  }
  if (watch->parsed()) return Follow(client, poll_client, job_id, g);
  if (events->parsed()) {
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    req.set_after_event_id(after);
    req.set_follow(follow);
    absl::Status s = client.WatchJob(req, [&](const v1::Event& e) {
      std::cout << (g.format() == Format::kTable ? EventLine(e) : ProtoToJsonLine(e))
                << std::endl;
      return true;
    });
    return s.ok() ? 0 : Report(s, g.server);
  }
  if (logs->parsed()) {
    for (int32_t r : log_ranks) {
      if (r < 0) {
        std::cerr << "dhpctl: --rank " << r << " is negative; world ranks start at 0\n";
        return 2;
      }
    }
    if (log_attempt < 0) {
      std::cerr << "dhpctl: --attempt " << log_attempt
                << " is negative; attempts start at 1 (0: the current one)\n";
      return 2;
    }
    return Logs(client, job_id, log_ranks, log_attempt, follow, g);
  }
  if (checkpoints->parsed()) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    absl::StatusOr<v1::GetJobResponse> resp = client.GetJob(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    v1::GetJobResponse only;
    *only.mutable_checkpoints() = resp->checkpoints();
    return Print(only, g, CheckpointsTable(*resp));
  }
  if (export_cmd->parsed() && on_controller) {
    std::vector<std::string> local;
    for (CLI::Option* o : {out_opt, shard_opt, data_root_opt, dhp_ckpt_opt}) {
      if (o->count() > 0) local.push_back(o->get_name());
    }
    if (absl::Status s = CheckOnControllerFlags(local); !s.ok()) {
      std::cerr << "dhpctl: " << s.message() << "\n";
      return 2;
    }
    v1::ExportCheckpointRequest req;
    req.set_job_id(job_id);
    if (export_checkpoint > 0) req.set_checkpoint_id(export_checkpoint);
    if (dtype_opt->count() > 0) req.set_dtype(export_flags.dtype);
    absl::StatusOr<v1::ExportCheckpointResponse> resp = client.ExportCheckpoint(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return FollowExport(client, resp->export_(), export_wait, g);
  }
  if (export_cmd->parsed()) {
    if (export_flags.out_dir.empty()) {
      std::cerr << "dhpctl: export needs --out DIR (or --on-controller, to let the controller "
                   "write it)\n";
      return 2;
    }
    if (export_wait) {
      std::cerr << "dhpctl: --wait is for --on-controller (a local export always waits)\n";
      return 2;
    }
    std::optional<int64_t> id;
    if (export_checkpoint >= 0) id = export_checkpoint;
    return Export(client, job_id, id, dhp_ckpt, export_flags, g);
  }
  if (export_status->parsed()) {
    v1::GetExportRequest req;
    req.set_id(export_id);
    absl::StatusOr<v1::GetExportResponse> resp = client.GetExport(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return FollowExport(client, resp->export_(), export_wait, g);
  }
  if (exports_cmd->parsed()) {
    v1::ListExportsRequest req;
    req.set_job_id(job_id);
    absl::StatusOr<v1::ListExportsResponse> resp = client.ListExports(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return Print(*resp, g, ExportsTable(*resp));
  }
  if (top->parsed()) {
    std::optional<int> interval_ms = ParseInterval(top_interval);
    if (!interval_ms || *interval_ms < 100) {
      std::cerr << "dhpctl: --interval " << top_interval
                << " is not a refresh interval of at least 100ms; use e.g. 1s, 500ms or 2\n";
      return 2;
    }
    return Top(client, job_id, *interval_ms, top_once, g);
  }
  if (drain->parsed()) {
    v1::DrainNodeRequest req;
    req.set_node_id(node_id);
    req.set_reason(reason);
    absl::StatusOr<v1::DrainNodeResponse> resp = client.DrainNode(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return Print(*resp, g, DrainSummary(*resp));
  }
  if (uncordon->parsed()) {
    v1::UncordonNodeRequest req;
    req.set_node_id(node_id);
    absl::StatusOr<v1::UncordonNodeResponse> resp = client.UncordonNode(req);
    if (!resp.ok()) return Report(resp.status(), g.server);
    return Print(*resp, g, "node " + node_id + " uncordoned: ranks may be placed there again\n");
  }
  if (nodes->parsed()) {  // every page
    v1::ListNodesRequest req;
    v1::ListNodesResponse all;
    do {
      absl::StatusOr<v1::ListNodesResponse> page = client.ListNodes(req);
      if (!page.ok()) return Report(page.status(), g.server);
      for (const v1::Node& n : page->nodes()) *all.add_nodes() = n;
      req.set_page_token(page->next_page_token());
    } while (!req.page_token().empty());
    std::vector<v1::Node> list_nodes(all.nodes().begin(), all.nodes().end());
    return Print(all, g, NodesTable(list_nodes, Now()));
  }
  return 2;
}
