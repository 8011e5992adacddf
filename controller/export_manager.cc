#include "controller/export_manager.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/find_tool.h"
#include "common/ids.h"
#include "common/logging.h"
#include "common/proto_enum.h"
#include "common/utf8.h"
#include "controller/time_util.h"

extern char** environ;

namespace dhp::controller {
namespace {

constexpr const char* kDtypes[] = {"bf16", "fp32", "fp16", "keep"};
constexpr char kDefaultDtype[] = "bf16";

// `text` cut to its last `n` bytes, never in the middle of a UTF-8 sequence.
std::string Tail(const std::string& text, size_t n) {
  if (text.size() <= n) return text;
  size_t start = text.size() - n;
  while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  return "..." + text.substr(start);
}

// For messages: a value from a request, printable and short.
std::string Shown(const std::string& value) {
  std::string shown = EscapeInvalidUtf8(value.size() > 64 ? value.substr(0, 64) + "..." : value);
  return absl::StrCat("\"", shown, "\"");
}

std::string Listing(const std::vector<v1::Checkpoint>& all) {
  std::vector<std::string> items;
  for (const v1::Checkpoint& c : all) {
    items.push_back(absl::StrCat(c.id(), " (step ", c.step(), ", ", ShortName(c.state()), ")"));
  }
  return items.empty() ? "it has none" : absl::StrCat("it has ", absl::StrJoin(items, ", "));
}

// The checkpoint to export, as dhpctl export picks it locally (api/dhpctl/export.h).
absl::StatusOr<v1::Checkpoint> Pick(const std::string& job_id,
                                    const std::vector<v1::Checkpoint>& all, int64_t id) {
  if (id != 0) {
    for (const v1::Checkpoint& c : all) {
      if (c.id() != id) continue;
      if (c.state() != v1::CHECKPOINT_STATE_COMPLETE) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint_id: checkpoint ", id, " (step ", c.step(), ") of job ", job_id, " is ",
            ShortName(c.state()), ", not COMPLETE",
            c.reason().empty() ? "" : absl::StrCat(" (", c.reason(), ")"),
            "; export a COMPLETE one (dhpctl checkpoints ", job_id, ")"));
      }
      return c;
    }
    return absl::NotFoundError(absl::StrCat("checkpoint_id: job ", job_id, " has no checkpoint ",
                                            id, ": ", Listing(all), " (dhpctl checkpoints ",
                                            job_id, ")"));
  }
  const v1::Checkpoint* newest = nullptr;
  for (const v1::Checkpoint& c : all) {
    if (c.state() != v1::CHECKPOINT_STATE_COMPLETE) continue;
    if (newest == nullptr || c.step() > newest->step() ||
        (c.step() == newest->step() && c.id() > newest->id())) {
      newest = &c;
    }
  }
  if (newest == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has no COMPLETE checkpoint to export: ", Listing(all),
        " (checkpoint.every_steps, or dhpctl checkpoint ", job_id, " while it runs, writes one)"));
  }
  return *newest;
}

}  // namespace

absl::StatusOr<std::string> FindExportTool(const std::string& given, const std::string& self_dir,
                                           const std::string& path_env) {
  absl::StatusOr<std::string> found = FindTool("dhp-ckpt", given, self_dir, path_env);
  if (found.ok()) return found;
  if (!given.empty()) {
    return absl::NotFoundError(absl::StrCat("export.dhp_ckpt: ", found.status().message()));
  }
  return absl::NotFoundError(absl::StrCat(
      "this controller has no dhp-ckpt to export with (not in ", found.status().message(),
      "): set export.dhp_ckpt (--export-dhp-ckpt), or export where the checkpoint is readable "
      "with dhpctl export JOB --out DIR"));
}

absl::Status CheckExportRequest(const v1::ExportCheckpointRequest& req) {
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  if (req.checkpoint_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_id: ", req.checkpoint_id(),
                     " is negative; give an id from dhpctl checkpoints JOB (0: the newest "
                     "COMPLETE checkpoint)"));
  }
  if (!req.dtype().empty()) {
    bool known = false;
    for (const char* d : kDtypes) known = known || req.dtype() == d;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("dtype: ", Shown(req.dtype()), " is not one of ",
                       absl::StrJoin(kDtypes, ", "), " (empty: ", kDefaultDtype, ")"));
    }
  }
  return absl::OkStatus();
}

ExportManager::ExportManager(Store& store, const Clock& clock, ExportOptions options,
                             std::function<void(std::function<void()>)> post)
    : store_(store), clock_(clock), options_(std::move(options)), post_(std::move(post)) {}

ExportManager::~ExportManager() { Stop(); }

absl::Status ExportManager::Recover() {
  absl::StatusOr<std::vector<v1::Export>> left =
      store_.ListExportsInStates({v1::EXPORT_STATE_PENDING, v1::EXPORT_STATE_RUNNING});
  if (!left.ok()) return left.status();
  for (v1::Export& e : *left) {
    const bool ran = e.state() == v1::EXPORT_STATE_RUNNING;
    // dhp-ckpt writes into <out>.tmp-XXXXXX and renames it at the end: drop what it left.
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(options_.root, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      if (absl::StartsWith(it->path().filename().string(), e.id() + ".tmp-")) {
        std::error_code rm;
        std::filesystem::remove_all(it->path(), rm);
      }
    }
    Fail(e, ran ? "controller restarted during the export"
                : "controller restarted before the export started");
  }
  return absl::OkStatus();
}

absl::Status ExportManager::Create(const v1::ExportCheckpointRequest& req,
                                   v1::ExportCheckpointResponse* resp) {
  if (absl::Status s = CheckExportRequest(req); !s.ok()) return s;
  absl::StatusOr<v1::Job> job = store_.GetJob(req.job_id());
  if (!job.ok()) return job.status();
  absl::StatusOr<v1::Checkpoint> ckpt =
      Pick(job->id(), store_.ListCheckpoints(job->id()), req.checkpoint_id());
  if (!ckpt.ok()) return ckpt.status();
  if (options_.dhp_ckpt.empty()) {
    return absl::FailedPreconditionError(options_.dhp_ckpt_error.empty()
                                             ? "this controller has no dhp-ckpt to export with"
                                             : options_.dhp_ckpt_error);
  }
  v1::Export e;
  e.set_id(NewId("x"));
  e.set_job_id(job->id());
  e.set_checkpoint_id(ckpt->id());
  e.set_step(ckpt->step());
  e.set_checkpoint_path(ckpt->path());
  e.set_dtype(req.dtype().empty() ? kDefaultDtype : req.dtype());
  e.set_state(v1::EXPORT_STATE_PENDING);
  e.set_out_dir(options_.root + "/" + e.id());
  *e.mutable_create_time() = MicrosToTimestamp(clock_.NowMicros());
  if (absl::Status s = store_.PutExport(e); !s.ok()) return s;
  DHP_LOG(INFO) << "export " << e.id() << ": checkpoint " << e.checkpoint_id() << " (step "
                << e.step() << ") of job " << e.job_id() << " to " << e.out_dir() << " as "
                << e.dtype();
  pending_.push_back(e.id());
  StartPending();
  absl::StatusOr<v1::Export> now = store_.GetExport(e.id());  // maybe RUNNING already
  *resp->mutable_export_() = now.ok() ? *now : e;
  return absl::OkStatus();
}

absl::Status ExportManager::Get(const v1::GetExportRequest& req, v1::GetExportResponse* resp) {
  if (req.id().empty()) return absl::InvalidArgumentError("id: must not be empty");
  absl::StatusOr<v1::Export> e = store_.GetExport(req.id());
  if (!e.ok()) return e.status();
  *resp->mutable_export_() = *std::move(e);
  return absl::OkStatus();
}

absl::Status ExportManager::List(const v1::ListExportsRequest& req,
                                 v1::ListExportsResponse* resp) {
  if (req.job_id().empty()) return absl::InvalidArgumentError("job_id: must not be empty");
  if (absl::StatusOr<v1::Job> job = store_.GetJob(req.job_id()); !job.ok()) return job.status();
  absl::StatusOr<std::vector<v1::Export>> all = store_.ListExports(req.job_id());
  if (!all.ok()) return all.status();
  for (v1::Export& e : *all) *resp->add_exports() = std::move(e);
  return absl::OkStatus();
}

void ExportManager::StartPending() {
  while (!pending_.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || runners_.size() >= static_cast<size_t>(options_.max_concurrent)) return;
    }
    const std::string id = pending_.front();
    pending_.pop_front();
    absl::StatusOr<v1::Export> e = store_.GetExport(id);
    if (!e.ok()) {
      DHP_LOG(ERROR) << "export " << id << " vanished before it started: " << e.status();
      continue;
    }
    e->set_state(v1::EXPORT_STATE_RUNNING);
    *e->mutable_start_time() = MicrosToTimestamp(clock_.NowMicros());
    if (absl::Status s = store_.PutExport(*e); !s.ok()) {
      DHP_LOG(ERROR) << "export " << id << " not started: " << s;
      continue;
    }
    std::vector<std::string> argv = {options_.dhp_ckpt, "export", e->checkpoint_path(),
                                     "--hf-dir", e->out_dir(), "--dtype", e->dtype()};
    if (!options_.data_root.empty()) argv.insert(argv.end(), {"--data-root", options_.data_root});
    std::lock_guard<std::mutex> lock(mu_);
    auto runner = std::make_unique<Runner>();
    Runner* raw = runner.get();
    runners_[id] = std::move(runner);
    raw->thread = std::thread(&ExportManager::Run, this, id, std::move(argv));
  }
}

void ExportManager::Run(const std::string& id, std::vector<std::string> argv) {
  bool ok = false;
  std::string message;
  auto finish = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;  // the record stays RUNNING; Recover fails it at the next start
    post_([this, id, ok, message] { Finish(id, ok, message); });
  };
  std::error_code ec;
  std::filesystem::create_directories(options_.root, ec);
  if (ec) {
    message = absl::StrCat("cannot create export.root ", options_.root, ": ", ec.message());
    return finish();
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    message = absl::StrCat("cannot create a pipe for dhp-ckpt: ", std::strerror(errno));
    return finish();
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&files, fds[1], 1);
  posix_spawn_file_actions_adddup2(&files, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The controller blocks SIGINT/SIGTERM (sigwait) and ignores SIGPIPE; the child must not
  // inherit that. Its own process group, so that Stop ends it with anything it starts.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid = 0;
  int err = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);  // Stop either sees the pid or stops the spawn
    if (stopping_) {
      err = ECANCELED;
    } else {
      err = ::posix_spawn(&pid, args[0], &files, &attr, args.data(), environ);
      if (err == 0) runners_[id]->pid = pid;
    }
  }
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    message = absl::StrCat("cannot run ", argv[0], ": ", std::strerror(err));
    return finish();
  }
  std::string output;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(buf, static_cast<size_t>(n));
    if (output.size() > 2 * options_.message_bytes) output = Tail(output, options_.message_bytes);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    runners_[id]->pid = 0;
  }
  output = std::string(absl::StripTrailingAsciiWhitespace(Tail(output, options_.message_bytes)));
  output = EscapeInvalidUtf8(output);  // the record's strings must be UTF-8
  ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok) {
    message = output;
  } else if (WIFSIGNALED(status)) {
    message = absl::StrCat("dhp-ckpt was killed by signal ", WTERMSIG(status), ": ", output);
  } else {
    message = absl::StrCat("dhp-ckpt exited with code ", WEXITSTATUS(status), ": ", output);
  }
  finish();
}

void ExportManager::Finish(const std::string& id, bool ok, const std::string& message) {
  std::unique_ptr<Runner> runner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = runners_.find(id);
    if (it != runners_.end()) {
      runner = std::move(it->second);
      runners_.erase(it);
    }
  }
  if (runner != nullptr && runner->thread.joinable()) runner->thread.join();  // it is ending
  absl::StatusOr<v1::Export> e = store_.GetExport(id);
  if (!e.ok()) {
    DHP_LOG(ERROR) << "export " << id << " ended but its record cannot be read: " << e.status();
  } else if (!ok) {
    Fail(*e, message);
  } else {
    e->set_state(v1::EXPORT_STATE_SUCCEEDED);
    e->set_message(message);
    *e->mutable_finish_time() = MicrosToTimestamp(clock_.NowMicros());
    if (absl::Status s = store_.PutExport(*e); !s.ok()) {
      DHP_LOG(ERROR) << "export " << id << " succeeded but cannot be recorded: " << s;
    }
    DHP_LOG(INFO) << "export " << id << " SUCCEEDED: " << e->out_dir();
  }
  StartPending();
}

void ExportManager::Fail(v1::Export e, const std::string& message) {
  e.set_state(v1::EXPORT_STATE_FAILED);
  e.set_message(message);
  *e.mutable_finish_time() = MicrosToTimestamp(clock_.NowMicros());
  if (absl::Status s = store_.PutExport(e); !s.ok()) {
    DHP_LOG(ERROR) << "export " << e.id() << " failed but cannot be recorded: " << s;
  }
  DHP_LOG(WARNING) << "export " << e.id() << " FAILED: " << message;
}

void ExportManager::Stop() {
  std::map<std::string, std::unique_ptr<Runner>> runners;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [id, runner] : runners_) {
      if (runner->pid > 0) ::kill(-runner->pid, SIGTERM);
    }
  }
  // Join outside the lock (a runner takes it to finish); the map stays until then, since a
  // runner reads its own entry.
  std::vector<std::thread*> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, runner] : runners_) threads.push_back(&runner->thread);
  }
  for (std::thread* t : threads) {
    if (t->joinable()) t->join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  runners.swap(runners_);
}

}  // namespace dhp::controller
