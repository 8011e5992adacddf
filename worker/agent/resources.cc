#include "worker/agent/resources.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace dhp::worker {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string RunCommand(const std::string& cmd) {
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  if (pclose(pipe) != 0) return "";
  return out;
}

int64_t MemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kb;
      return kb * 1024;
    }
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

}  // namespace

v1::NodeResources ParseNvidiaSmi(const std::string& csv) {
  v1::NodeResources r;
  std::istringstream lines(csv);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> cols;
    std::istringstream fields(line);
    std::string col;
    while (std::getline(fields, col, ',')) cols.push_back(Trim(col));
    if (cols.size() < 4) continue;
    try {
      v1::Gpu* gpu = r.add_gpus();
      gpu->set_index(std::stoi(cols[0]));
      gpu->set_name(cols[1]);
      gpu->set_memory_bytes(std::stoll(cols[2]) * 1024 * 1024);
      gpu->set_uuid(cols[3]);
    } catch (const std::exception&) {
      r.mutable_gpus()->RemoveLast();
    }
  }
  return r;
}

v1::NodeResources DetectResources(int cpu_slots) {
  v1::NodeResources r = ParseNvidiaSmi(RunCommand(
      "nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits "
      "2>/dev/null"));
  if (cpu_slots <= 0 && r.gpus_size() == 0) {
    cpu_slots = static_cast<int>(std::thread::hardware_concurrency());
  }
  r.set_cpu_slots(cpu_slots > 0 ? cpu_slots : 0);
  r.set_memory_bytes(MemTotalBytes());
  return r;
}

std::string LocalHostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace dhp::worker
