#include "api/dhpctl/follow.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

#include "api/dhpctl/log_lines.h"
#include "api/dhpctl/output.h"
#include "api/dhpctl/progress.h"
#include "api/dhpctl/top.h"
#include "common/proto_enum.h"

namespace dhp::dhpctl {
namespace {

int FinalExit(v1::JobState state) {
  if (state == v1::JOB_STATE_FAILED) return 4;
  if (state == v1::JOB_STATE_CANCELLED) return 5;
  return 0;
}

bool Final(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

}  // namespace

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
    if (Interrupted()) {
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
    if (Interrupted()) {
      std::cout << lines.Flush() << std::flush;
      return kInterrupted;
    }
    absl::StatusOr<v1::GetLogsResponse> resp = client.GetLogs(cursor.NextRequest());
    if (!resp.ok()) {
      // While following, ride out a controller restart (up to a minute).
      const absl::StatusCode code = resp.status().code();
      const bool transient =
          code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
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
      const bool transient =
          code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
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

}  // namespace dhp::dhpctl
