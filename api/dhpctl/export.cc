#include "api/dhpctl/export.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/dhpctl/output.h"
#include "common/find_tool.h"
#include "common/proto_enum.h"

extern char** environ;

namespace dhp::dhpctl {
namespace {

// "3 checkpoints: 1 (step 50, COMPLETE), ..." for messages.
std::string Listing(const v1::GetJobResponse& job) {
  std::vector<std::string> items;
  for (const v1::Checkpoint& c : job.checkpoints()) {
    items.push_back(absl::StrCat(c.id(), " (step ", c.step(), ", ", ShortName(c.state()), ")"));
  }
  if (items.empty()) return "it has none";
  return absl::StrCat("it has ", absl::StrJoin(items, ", "));
}

}  // namespace

absl::StatusOr<v1::Checkpoint> PickCheckpoint(const v1::GetJobResponse& job,
                                              std::optional<int64_t> id) {
  const std::string& job_id = job.job().id();
  if (id.has_value()) {
    for (const v1::Checkpoint& c : job.checkpoints()) {
      if (c.id() != *id) continue;
      if (c.state() != v1::CHECKPOINT_STATE_COMPLETE) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", *id, " (step ", c.step(), ") of job ", job_id, " is ",
            ShortName(c.state()), ", not COMPLETE",
            c.reason().empty() ? "" : absl::StrCat(" (", c.reason(), ")"),
            ": export a COMPLETE one (dhpctl checkpoints ", job_id, ")"));
      }
      return c;
    }
    return absl::NotFoundError(absl::StrCat("job ", job_id, " has no checkpoint ", *id, ": ",
                                            Listing(job), " (dhpctl checkpoints ", job_id,
                                            "; --checkpoint takes the ID column)"));
  }
  const v1::Checkpoint* newest = nullptr;
  for (const v1::Checkpoint& c : job.checkpoints()) {
    if (c.state() != v1::CHECKPOINT_STATE_COMPLETE) continue;
    if (newest == nullptr || c.step() > newest->step() ||
        (c.step() == newest->step() && c.id() > newest->id())) {
      newest = &c;
    }
  }
  if (newest == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has no COMPLETE checkpoint to export: ", Listing(job),
                     " (checkpoint.every_steps, or dhpctl checkpoint ", job_id,
                     " while it runs, writes one)"));
  }
  return *newest;
}

absl::StatusOr<std::string> FindDhpCkpt(const std::string& given, const std::string& self_dir,
                                        const std::string& path_env) {
  absl::StatusOr<std::string> found = FindTool("dhp-ckpt", given, self_dir, path_env);
  if (found.ok()) return found;
  if (!given.empty()) return absl::NotFoundError(absl::StrCat("--dhp-ckpt ", found.status().message()));
  return absl::NotFoundError(absl::StrCat(
      "dhp-ckpt (the LibTorch tool that re-assembles checkpoints) is not in ",
      found.status().message(), ": pass --dhp-ckpt PATH"));
}

std::string SelfDir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  const std::string exe(buf, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

std::vector<std::string> DhpCkptArgs(const std::string& dhp_ckpt, const v1::Checkpoint& c,
                                     const ExportFlags& flags) {
  std::vector<std::string> argv = {dhp_ckpt, "export", c.path(), "--hf-dir", flags.out_dir,
                                   "--dtype", flags.dtype};
  if (!flags.max_shard_size.empty()) {
    argv.insert(argv.end(), {"--max-shard-size", flags.max_shard_size});
  }
  if (!flags.data_root.empty()) argv.insert(argv.end(), {"--data-root", flags.data_root});
  return argv;
}

absl::Status CheckOnControllerFlags(const std::vector<std::string>& local_flags_given) {
  if (local_flags_given.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      absl::StrJoin(local_flags_given, ", "),
      local_flags_given.size() == 1 ? " is" : " are",
      " for a local export only: with --on-controller the controller writes the export into "
      "its export.root with its own dhp-ckpt (drop them, or leave out --on-controller)"));
}

std::string ExportSummary(const v1::Export& e) {
  std::string line = absl::StrCat("export ", e.id(), " of checkpoint ", e.checkpoint_id(),
                                  " (step ", e.step(), ") of job ", e.job_id(), " as ",
                                  e.dtype(), ": ", ShortName(e.state()), " -> ", e.out_dir(),
                                  "\n");
  if (ExportFinal(e.state()) && !e.message().empty()) absl::StrAppend(&line, e.message(), "\n");
  return line;
}

bool ExportFinal(v1::ExportState state) {
  return state == v1::EXPORT_STATE_SUCCEEDED || state == v1::EXPORT_STATE_FAILED;
}

int ExportExit(v1::ExportState state) { return state == v1::EXPORT_STATE_FAILED ? 1 : 0; }

std::string ExportsTable(const v1::ListExportsResponse& resp) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Export& e : resp.exports()) {
    rows.push_back({e.id(), ShortName(e.state()), std::to_string(e.checkpoint_id()),
                    std::to_string(e.step()), e.dtype(), e.out_dir()});
  }
  return RenderTable({"ID", "STATE", "CHECKPOINT", "STEP", "DTYPE", "OUT"}, rows);
}

absl::StatusOr<int> RunAndWait(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (err != 0) {
    return absl::InternalError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(err)));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("waiting for ", argv[0], ": ", std::strerror(errno)));
    }
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

}  // namespace dhp::dhpctl
