#include "worker/agent/rank_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/status/status.h"

extern char** environ;

namespace dhp::worker {
namespace {

// A name in PATH resolved the way execvp would; a name with a slash, or one not found, as is
// (exec then fails in the child, which says so in the log).
std::string ResolveBinary(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return name;
}

// The agent's environment with `extra` set on top, as "KEY=VALUE" strings.
std::vector<std::string> BuildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) vars[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const auto& [key, value] : extra) vars[key] = value;
  std::vector<std::string> out;
  for (const auto& [key, value] : vars) out.push_back(key + "=" + value);
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// strerror is not async-signal-safe; the child names the usual exec errors itself.
const char* ExecErrorName(int err) {
  switch (err) {
    case ENOENT: return "no such file or directory";
    case EACCES: return "permission denied (not executable?)";
    case ENOEXEC: return "not an executable format";
    case ENOTDIR: return "a path component is not a directory";
    case ETXTBSY: return "text file busy";
    case E2BIG: return "argument list too long";
    case ENOMEM: return "out of memory";
    default: return "exec failed";
  }
}

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Runs in the forked child: only async-signal-safe calls. Never returns.
[[noreturn]] void ExecChild(const char* path, char* const argv[], char* const envp[], int log_fd,
                            int null_fd, const std::string& error_prefix, int max_fd,
                            pid_t agent) {
  setpgid(0, 0);
  // If the agent dies (crash, SIGKILL) the rank dies too, rather than running on unsupervised
  // next to the one a restarted agent would start.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != agent) _exit(126);  // it died before prctl
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  dup2(null_fd, STDIN_FILENO);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
    for (int fd = 3; fd < max_fd; ++fd) close(fd);
  execve(path, argv, envp);
  const int err = errno;
  const char* reason = ExecErrorName(err);
  WriteAll(STDERR_FILENO, error_prefix.data(), error_prefix.size());
  WriteAll(STDERR_FILENO, reason, std::strlen(reason));
  WriteAll(STDERR_FILENO, "\n", 1);
  _exit(127);
}

int MaxFd() {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 65536;
  return static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 65536));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RankProcess>> RankProcess::Start(const ProcessSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError("ProcessSpec.argv is empty: name the binary to run");
  }
  std::error_code ec;
  const std::filesystem::path log_path(spec.log_path);
  if (log_path.has_parent_path()) std::filesystem::create_directories(log_path.parent_path(), ec);
  if (ec) {
    return absl::FailedPreconditionError("cannot create the log directory of " + spec.log_path +
                                         ": " + ec.message());
  }
  const int log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::FailedPreconditionError("cannot open log " + spec.log_path + ": " +
                                         std::strerror(errno));
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const std::string path = ResolveBinary(spec.argv[0]);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<std::string> env_strings = BuildEnvironment(spec.env);
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<char*> envp = CStrings(env_strings);
  const std::string error_prefix = "dhp-worker: cannot execute " + path + ": ";
  const int max_fd = MaxFd();

  const pid_t agent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    ExecChild(path.c_str(), argv.data(), envp.data(), log_fd, null_fd, error_prefix, max_fd,
              agent);
  }
  const int fork_errno = errno;
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  if (pid < 0) return absl::ResourceExhaustedError(std::string("fork: ") + std::strerror(fork_errno));
  setpgid(pid, pid);  // also here, so the group exists before we signal it (EACCES after exec)
  return std::unique_ptr<RankProcess>(new RankProcess(pid, spec.log_path));
}

RankProcess::~RankProcess() {
  if (exited_) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

bool RankProcess::Poll() {
  if (exited_) return true;
  siginfo_t info{};
  // WNOWAIT: the child stays a zombie, so its pid (the group id) cannot be reused while we
  // SIGKILL what is left of its group.
  const int r = waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT);
  if (r < 0 && errno == ECHILD) {  // reaped elsewhere: nothing left to learn about it
    exited_ = true;
    exit_code_ = -1;
    log_tail_ = "dhp-worker: lost the exit status of pid " + std::to_string(pid_);
    return true;
  }
  if (r == 0 && info.si_pid == pid_) {
    kill(-pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    Reaped(status);
    return true;
  }
  if (terminating_ && !killed_ && std::chrono::steady_clock::now() >= kill_at_) Kill();
  return false;
}

void RankProcess::Reaped(int wait_status) {
  exited_ = true;
  if (WIFSIGNALED(wait_status)) {
    exit_code_ = -1;
    signal_ = WTERMSIG(wait_status);
  } else {
    exit_code_ = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  }
  if (exit_code_ != 0) log_tail_ = LogTail(log_path_);
}

void RankProcess::Terminate(std::chrono::milliseconds grace, int signal) {
  if (exited_) return;
  const SteadyTime deadline = std::chrono::steady_clock::now() + grace;
  if (terminating_) {
    kill_at_ = std::min(kill_at_, deadline);
    return;
  }
  terminating_ = true;
  kill_at_ = deadline;
  kill(-pid_, signal);
}

void RankProcess::Kill() {
  if (exited_) return;
  terminating_ = true;
  killed_ = true;
  kill(-pid_, SIGKILL);
}

std::string LogTail(const std::string& path, int max_lines, int max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  std::string buf;
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    const off_t start = std::max<off_t>(0, st.st_size - max_bytes);
    buf.resize(static_cast<size_t>(st.st_size - start));
    const ssize_t n = pread(fd, buf.data(), buf.size(), start);
    buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
    if (start > 0) {  // drop the line the byte limit cut, unless it is all there is
      const size_t nl = buf.find('\n');
      if (nl != std::string::npos && nl + 1 < buf.size()) buf.erase(0, nl + 1);
    }
  }
  close(fd);
  // Keep the last max_lines lines; a final newline does not start another line.
  size_t pos = buf.size();
  if (pos > 0 && buf[pos - 1] == '\n') --pos;
  for (int lines = 0; pos > 0; --pos) {
    if (buf[pos - 1] == '\n' && ++lines == max_lines) break;
  }
  return buf.substr(pos);
}

}  // namespace dhp::worker
