#include "bench/controller_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "nlohmann/json.hpp"

namespace dhp::bench {
namespace {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// Reads {"grpc_port": N, "http_port": M}; false while the file is absent or incomplete.
// dhp-controller's {"grpc_port": G, "http_port": H}, or dhp-relay's {"grpc_port": G} (then
// `http_port` is left 0).
bool ReadPortFile(const std::string& path, int* grpc_port, int* http_port, bool relay) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("grpc_port") || !j["grpc_port"].is_number_integer()) {
    return false;
  }
  *grpc_port = j["grpc_port"].get<int>();
  if (relay) return *grpc_port > 0;
  if (!j.contains("http_port") || !j["http_port"].is_number_integer()) return false;
  *http_port = j["http_port"].get<int>();
  return *grpc_port > 0 && *http_port > 0;
}

std::string Name(const std::string& binary) {
  return std::filesystem::path(binary).filename().string();
}

}  // namespace

std::string FileTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  return s.size() > max_bytes ? "..." + s.substr(s.size() - max_bytes) : s;
}

absl::StatusOr<std::unique_ptr<ControllerProcess>> ControllerProcess::StartRelay(
    const std::string& binary, const std::string& controller,
    const std::vector<std::string>& extra_args, std::chrono::milliseconds ready_timeout) {
  std::vector<std::string> args = {"--controller", controller, "--listen", "127.0.0.1:0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return Spawn(binary, args, ready_timeout, /*relay=*/true);
}

absl::StatusOr<std::unique_ptr<ControllerProcess>> ControllerProcess::Start(
    const std::string& binary, const std::vector<std::string>& extra_args,
    std::chrono::milliseconds ready_timeout) {
  return Spawn(binary, extra_args, ready_timeout, /*relay=*/false);
}

absl::StatusOr<std::unique_ptr<ControllerProcess>> ControllerProcess::Spawn(
    const std::string& binary, const std::vector<std::string>& extra_args,
    std::chrono::milliseconds ready_timeout, bool relay) {
  if (relay && ::access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError("relay binary " + binary +
                               " is missing or not executable; build it with `bazel build "
                               "//worker/relay:dhp-relay`");
  }
  if (::access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError("controller binary " + binary +
                               " is missing or not executable; build it with `bazel build "
                               "//controller:dhp-controller` or pass --controller-bin");
  }
  std::unique_ptr<ControllerProcess> p(new ControllerProcess());
  std::string tmpl = (std::filesystem::temp_directory_path() / "dhp-api-bench-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError("mkdtemp " + tmpl + ": " + std::strerror(errno));
  }
  p->temp_dir_ = tmpl;
  const std::string port_file = p->temp_dir_ + "/ports.json";
  std::vector<std::string> args = {binary,          "--data-dir",  p->temp_dir_ + "/data",
                                   "--grpc-port",   "0",           "--http-port",
                                   "0",             "--port-file", port_file};
  if (relay) args = {binary, "--port-file", port_file};
  args.insert(args.end(), extra_args.begin(), extra_args.end());

  const int log_fd = ::open(p->log_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError("cannot create " + p->log_path());
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return absl::InternalError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Child: stdin from /dev/null, stdout/stderr to the log; its own process group, so a
    // Ctrl-C at the terminal reaches only the benchmark; and SIGTERM when the benchmark dies
    // however it dies, so no controller outlives it.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary.c_str(), argv.data());
    std::fprintf(stderr, "execv %s: %s\n", binary.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(log_fd);
  p->pid_ = pid;

  const auto deadline = std::chrono::steady_clock::now() + ready_timeout;
  while (!ReadPortFile(port_file, &p->grpc_port_, &p->http_port_, relay)) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      p->pid_ = -1;
      p->exit_ = DescribeWaitStatus(status);
      return absl::FailedPreconditionError(Name(binary) + " ended (" + p->exit_ +
                                           ") before listening; its log:\n" +
                                           FileTail(p->log_path()));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      p->keep_ = true;
      return absl::FailedPreconditionError(
          Name(binary) + " wrote no port file within " + std::to_string(ready_timeout.count()) +
          " ms; its log (kept in " + p->temp_dir_ + "):\n" + FileTail(p->log_path()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return p;
}

namespace {

// utime + stime in seconds from a /proc/.../stat file; -1 if unreadable.
double StatCpuSeconds(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return -1;
  // Fields after the ")" that closes the command name: state is field 3; utime and stime are
  // fields 14 and 15.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return -1;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace

double ControllerProcess::CpuSeconds() const {
  if (pid_ <= 0) return -1;
  return StatCpuSeconds("/proc/" + std::to_string(pid_) + "/stat");
}

std::map<pid_t, ControllerProcess::ThreadTimes> ControllerProcess::ThreadCpuTimes() const {
  std::map<pid_t, ThreadTimes> out;
  if (pid_ <= 0) return out;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid_) + "/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::atoi(entry.path().filename().c_str()));
    if (tid <= 0) continue;
    // schedstat: "<ns on cpu> <ns waiting on a runqueue> <timeslices>".
    std::ifstream in(entry.path().string() + "/schedstat");
    long long on_cpu = 0, waiting = 0;
    ThreadTimes t;
    if (in >> on_cpu >> waiting) {
      t.cpu_s = on_cpu * 1e-9;
      t.runqueue_wait_s = waiting * 1e-9;
    } else if (const double s = StatCpuSeconds(entry.path().string() + "/stat"); s >= 0) {
      t.cpu_s = s;
    } else {
      continue;  // the thread has just exited
    }
    std::ifstream status(entry.path().string() + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 ||
          line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) {
        t.context_switches += std::atoll(line.c_str() + line.find(':') + 1);
      }
    }
    out[tid] = t;
  }
  return out;
}

int ControllerProcess::ThreadCount() const {
  if (pid_ <= 0) return -1;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

std::string ControllerProcess::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return exit_;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  pid_t r = 0;
  while ((r = ::waitpid(pid_, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (r == 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    exit_ = "killed after " + std::to_string(grace.count()) + " ms (" +
            DescribeWaitStatus(status) + ")";
  } else {
    exit_ = DescribeWaitStatus(status);
  }
  pid_ = -1;
  return exit_;
}

ControllerProcess::~ControllerProcess() {
  Stop();
  if (!keep_ && !temp_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
  }
}

}  // namespace dhp::bench
