#include "worker/agent/rank_launcher.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/ids.h"
#include "common/logging.h"

namespace dhp::worker {
namespace {

// The job id becomes a directory name: IsPathSafeId keeps it inside the log directory.
absl::Status ValidateLaunch(const v1::RankLaunch& l) {
  const std::string& job = l.job_id();
  if (!IsPathSafeId(job)) {
    return absl::InvalidArgumentError("RankLaunch.job_id '" + job + "' is not a job id (" +
                                      kPathSafeIdRule + ")");
  }
  if (l.attempt() < 1 || l.world_rank() < 0 || l.world_rank() >= l.world_size()) {
    return absl::InvalidArgumentError(
        "RankLaunch of job " + job + ": attempt " + std::to_string(l.attempt()) +
        ", world_rank " + std::to_string(l.world_rank()) + " and world_size " +
        std::to_string(l.world_size()) +
        " must satisfy attempt >= 1 and 0 <= world_rank < world_size");
  }
  if (l.slot() < 0) {
    return absl::InvalidArgumentError("RankLaunch of job " + job + ": slot " +
                                      std::to_string(l.slot()) + " is negative");
  }
  return absl::OkStatus();
}

// The names in a directory (not "." or ".."); none when it cannot be read.
std::vector<std::string> DirNames(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

// The number after `prefix` and before `suffix` in `name` ("attempt-3" -> 3); -1 when `name`
// is not exactly that with a number of at most 9 digits.
int NumberIn(const std::string& name, const std::string& prefix, const std::string& suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return -1;
  }
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0') ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return -1;  // not a name LogPath writes
  }
  return std::stoi(digits);
}

}  // namespace

std::vector<RankLog> FindRankLogs(const std::string& log_dir, int64_t modified_since_unix_s) {
  std::vector<RankLog> out;
  for (const std::string& job : DirNames(log_dir)) {
    if (!IsPathSafeId(job)) continue;
    for (const std::string& attempt_dir : DirNames(log_dir + "/" + job)) {
      const int attempt = NumberIn(attempt_dir, "attempt-", "");
      if (attempt < 1) continue;
      const std::string dir = log_dir + "/" + job + "/" + attempt_dir;
      for (const std::string& file : DirNames(dir)) {
        const int rank = NumberIn(file, "rank-", ".log");
        struct stat st {};
        const std::string path = dir + "/" + file;
        if (rank < 0 || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
            st.st_mtime < modified_since_unix_s) {
          continue;
        }
        out.push_back({{job, attempt, rank}, path});
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const RankLog& a, const RankLog& b) { return a.key < b.key; });
  return out;
}

std::string RankKey::ToString() const {
  return "job " + job_id + " attempt " + std::to_string(attempt) + " rank " +
         std::to_string(world_rank);
}

RankLauncher::RankLauncher(RankLauncherOptions options) : options_(std::move(options)) {}

std::vector<std::string> RankLauncher::Argv(const v1::RankLaunch& l) const {
  std::vector<std::string> argv = {
      options_.rank_binary,
      "--controller", options_.controller,
      "--job", l.job_id(),
      "--attempt", std::to_string(l.attempt()),
      "--world-rank", std::to_string(l.world_rank()),
      "--world-size", std::to_string(l.world_size()),
      "--device", l.gpu() ? "cuda:0" : "cpu",
      "--data-root", options_.data_root,
  };
  // A rank with its own credential (DHP_TOKEN, see Env) does not get the agent's token.
  if (!options_.token_file.empty() && l.credential().empty()) {
    argv.push_back("--token-file");
    argv.push_back(options_.token_file);
  }
  argv.insert(argv.end(), options_.tls_args.begin(), options_.tls_args.end());
  for (const std::string& root : options_.extra_data_roots) {
    argv.push_back("--allow-data-root");
    argv.push_back(root);
  }
  if (options_.allow_any_data_path) argv.push_back("--allow-any-data-path");
  if (options_.peak_tflops > 0) {
    argv.push_back("--peak-tflops");
    argv.push_back(absl::StrCat(options_.peak_tflops));
  }
  if (!options_.progress_via.empty()) {
    argv.push_back("--progress-via");
    argv.push_back(options_.progress_via);
  }
  return argv;
}

std::vector<std::pair<std::string, std::string>> RankLauncher::Env(
    const v1::RankLaunch& l) const {
  std::vector<std::pair<std::string, std::string>> env = {
      {"OMP_NUM_THREADS", "1"},
      {"OMP_WAIT_POLICY", "PASSIVE"},
      {"OPENBLAS_NUM_THREADS", "1"},
      {"DHP_NODE_ID", options_.node_id},
  };
  if (l.gpu()) env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(l.slot()));
  // The rank's token, good for its job and attempt only (api/auth.h); it replaces any
  // DHP_TOKEN the agent was started with.
  if (!l.credential().empty()) env.emplace_back("DHP_TOKEN", l.credential());
  return env;
}

std::string RankLauncher::LogPath(const RankKey& key) const {
  return options_.log_dir + "/" + key.job_id + "/attempt-" + std::to_string(key.attempt) +
         "/rank-" + std::to_string(key.world_rank) + ".log";
}

void RankLauncher::Start(const v1::RankLaunch& launch) {
  const RankKey key = RankKey::Of(launch);
  started_.insert(key);
  Rank& rank = ranks_[key];
  rank.launch = launch;
  absl::Status valid = ValidateLaunch(launch);
  if (!valid.ok()) {
    rank.start_error = std::string(valid.message());
  } else {
    absl::StatusOr<std::unique_ptr<RankProcess>> process =
        RankProcess::Start({Argv(launch), Env(launch), LogPath(key)});
    if (process.ok()) {
      rank.process = std::move(*process);
      DHP_LOG(INFO) << "started " << key.ToString() << " (pid " << rank.process->pid() << ", "
                    << (launch.gpu() ? "gpu " : "cpu slot ") << launch.slot() << "), log "
                    << LogPath(key);
      return;
    }
    rank.start_error = std::string(process.status().message());
  }
  DHP_LOG(ERROR) << "cannot start " << key.ToString() << ": " << rank.start_error;
}

void RankLauncher::Stop(const RankKey& key, Rank& rank, const char* why, int signal) {
  if (rank.exited() || rank.stopped_by_agent) return;
  DHP_LOG(INFO) << "stopping " << key.ToString() << " (pid " << rank.process->pid() << "): " << why;
  rank.stopped_by_agent = true;
  // A preempted rank checkpoints first: it gets its job's grace (restart.preemption_grace_s).
  const int64_t job_grace_ms = int64_t{rank.launch.preemption_grace_s()} * 1000;
  const int64_t grace_ms =
      signal == SIGTERM && job_grace_ms > 0 ? job_grace_ms : options_.stop_grace_ms;
  rank.process->Terminate(std::chrono::milliseconds(grace_ms), signal);
}

void RankLauncher::Reconcile(const std::vector<v1::RankLaunch>& desired) {
  std::set<RankKey> wanted;
  for (const v1::RankLaunch& launch : desired) {
    const RankKey key = RankKey::Of(launch);
    wanted.insert(key);
    if (started_.count(key) == 0) Start(launch);
  }
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    Rank& rank = it->second;
    if (wanted.count(it->first) != 0) {
      ++it;
    } else if (rank.exited() && rank.exit_reported) {
      it = ranks_.erase(it);
    } else {
      Stop(it->first, rank, "no longer wanted", SIGINT);
      ++it;
    }
  }
}

void RankLauncher::Poll() {
  for (auto& [key, rank] : ranks_) {
    if (rank.process == nullptr || !rank.process->Poll() || rank.exit_logged) continue;
    rank.exit_logged = true;
    const RankProcess& p = *rank.process;
    DHP_LOG(INFO) << key.ToString() << " (pid " << p.pid() << ") exited: "
                  << (p.signal() != 0 ? "signal " + std::to_string(p.signal())
                                      : "status " + std::to_string(p.exit_code()))
                  << (rank.stopped_by_agent ? " (stopped by the agent)" : "");
  }
}

v1::RankStatus RankLauncher::StatusOf(const RankKey& key, const Rank& rank) {
  v1::RankStatus s;
  s.set_job_id(key.job_id);
  s.set_attempt(key.attempt);
  s.set_world_rank(key.world_rank);
  s.set_stopped_by_agent(rank.stopped_by_agent);
  if (rank.process == nullptr) {
    s.set_state(v1::RANK_PROCESS_STATE_EXITED);
    s.set_exit_code(127);
    s.set_log_tail("dhp-worker: " + rank.start_error);
    return s;
  }
  const RankProcess& p = *rank.process;
  s.set_pid(p.pid());
  if (!p.exited()) {
    s.set_state(v1::RANK_PROCESS_STATE_RUNNING);
    return s;
  }
  s.set_state(v1::RANK_PROCESS_STATE_EXITED);
  s.set_exit_code(p.exit_code());
  s.set_signal(p.signal());
  s.set_log_tail(p.log_tail());
  return s;
}

std::vector<v1::RankStatus> RankLauncher::Statuses() {
  std::vector<v1::RankStatus> out;
  for (auto& [key, rank] : ranks_) {
    out.push_back(StatusOf(key, rank));
    if (rank.exited()) rank.exit_reported = true;
  }
  return out;
}

std::vector<RankLog> RankLauncher::Logs() const {
  std::vector<RankLog> out;
  for (const auto& [key, rank] : ranks_) {
    if (rank.process != nullptr) out.push_back({key, rank.process->log_path()});
  }
  return out;
}

void RankLauncher::StopAll() {
  for (auto& [key, rank] : ranks_) Stop(key, rank, "the agent is stopping", SIGTERM);
}

bool RankLauncher::AllExited() const {
  for (const auto& [key, rank] : ranks_) {
    if (!rank.exited()) return false;
  }
  return true;
}

}  // namespace dhp::worker
