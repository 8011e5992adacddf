#include "worker/agent/log_shipper.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"

namespace dhp::worker {
namespace {

// Up to `max` bytes of the file from `offset`: fewer at its end, none when it is missing.
std::string ReadFrom(const std::string& path, int64_t offset, int64_t max) {
  std::string data;
  const int fd = max > 0 ? open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0) return data;
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_size > offset) {
    data.resize(static_cast<size_t>(std::min<int64_t>(max, st.st_size - offset)));
    const ssize_t n = pread(fd, data.data(), data.size(), offset);
    data.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  close(fd);
  return data;
}

int64_t FileSize(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

}  // namespace

LogShipper::LogShipper(LogShipperOptions options, SendFn send)
    : options_(std::move(options)), send_(std::move(send)) {}

void LogShipper::Track(const std::vector<RankLog>& logs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, log] : logs_) log.listed = false;
  for (const RankLog& l : logs) {
    Log& log = logs_[l.key];
    log.path = l.path;
    log.listed = true;
  }
}

void LogShipper::Resync() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, log] : logs_) log.probe = true;
}

void LogShipper::Adopt(const std::vector<RankLog>& logs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const RankLog& l : logs) {
    if (logs_.count(l.key) != 0) continue;
    Log& log = logs_[l.key];
    log.path = l.path;
    log.listed = false;
    log.probe = true;
    log.ask_size = true;
  }
}

size_t LogShipper::tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return logs_.size();
}

std::optional<int64_t> LogShipper::acknowledged(const RankKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = logs_.find(key);
  if (it == logs_.end()) return std::nullopt;
  return it->second.acked;
}

void LogShipper::DropFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = logs_.begin(); it != logs_.end();) {
    const Log& log = it->second;
    if (!log.listed && log.acked >= FileSize(log.path)) {
      it = logs_.erase(it);
    } else {
      ++it;
    }
  }
}

v1::AppendLogsRequest LogShipper::NextRequest() {
  struct Pending {
    RankKey key;
    std::string path;
    int64_t acked;
    bool probe, ask_size;
  };
  std::vector<Pending> logs;
  size_t start = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, log] : logs_) {
      if (cursor_ && !(*cursor_ < key)) ++start;  // keys are sorted: a prefix
      logs.push_back({key, log.path, log.acked, log.probe, log.ask_size});
    }
  }
  v1::AppendLogsRequest req;
  req.set_node_id(options_.node_id);
  int64_t budget = options_.max_request_bytes;
  std::optional<RankKey> last;
  for (size_t i = 0; i < logs.size(); ++i) {
    const auto& [key, path, acked, probe, ask_size] = logs[(start + i) % logs.size()];
    std::string data =
        ask_size ? "" : ReadFrom(path, acked, std::min(options_.max_chunk_bytes, budget));
    if (data.empty() && !probe) continue;
    if (req.chunks_size() >= options_.max_chunks_per_request) break;
    budget -= static_cast<int64_t>(data.size());
    v1::LogChunk* chunk = req.add_chunks();
    chunk->set_job_id(key.job_id);
    chunk->set_attempt(key.attempt);
    chunk->set_world_rank(key.world_rank);
    chunk->set_offset(acked);
    chunk->set_data(std::move(data));
    last = key;
  }
  if (last) {
    std::lock_guard<std::mutex> lock(mu_);
    cursor_ = last;
  }
  return req;
}

absl::Status LogShipper::Ship() {
  std::lock_guard<std::mutex> ship_lock(ship_mu_);
  for (int call = 0; call < options_.max_calls_per_round; ++call) {
    DropFinished();
    v1::AppendLogsRequest req = NextRequest();
    if (req.chunks_size() == 0) return absl::OkStatus();
    absl::StatusOr<v1::AppendLogsResponse> resp = send_(req);
    if (!resp.ok()) return resp.status();
    if (resp->sizes_size() != req.chunks_size()) {
      return absl::InternalError("AppendLogs answered " + std::to_string(resp->sizes_size()) +
                                 " sizes for " + std::to_string(req.chunks_size()) +
                                 " chunks; keeping the offsets");
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < req.chunks_size(); ++i) {
      const v1::LogChunk& chunk = req.chunks(i);
      auto it = logs_.find({chunk.job_id(), chunk.attempt(), chunk.world_rank()});
      if (it == logs_.end()) continue;
      it->second.acked = std::max<int64_t>(0, resp->sizes(i));
      it->second.probe = false;
      it->second.ask_size = false;
    }
  }
  DropFinished();
  return absl::OkStatus();
}

}  // namespace dhp::worker
