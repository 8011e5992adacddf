#include "controller/log_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/ids.h"
#include "absl/strings/strip.h"

namespace dhp::controller {
namespace {

namespace fs = std::filesystem;

absl::Status ValidateIds(const std::string& job_id, int32_t attempt, int32_t rank) {
  absl::Status s = LogStore::ValidateJobId(job_id);
  if (!s.ok()) return s;
  if (attempt < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("log attempt: ", attempt, " is not an attempt number (they start at 1)"));
  }
  if (rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("log world_rank: ", rank, " is negative; ranks start at 0"));
  }
  return absl::OkStatus();
}

absl::Status ErrnoError(const std::string& what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

// Writes all of [data, data + size) to fd; returns errno (0 on success).
int WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

std::string HumanCap(int64_t bytes) {
  constexpr int64_t kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10;
  if (bytes > 0 && bytes % kGiB == 0) return absl::StrCat(bytes / kGiB, " GiB");
  if (bytes > 0 && bytes % kMiB == 0) return absl::StrCat(bytes / kMiB, " MiB");
  if (bytes > 0 && bytes % kKiB == 0) return absl::StrCat(bytes / kKiB, " KiB");
  return absl::StrCat(bytes, " bytes");
}

}  // namespace

LogStore::LogStore(std::string root, LogStoreOptions options)
    : root_(std::move(root)), options_(options) {}

std::string LogStore::TruncationMarker(int64_t max_bytes) {
  return absl::StrCat("[dhp: log truncated at ", HumanCap(max_bytes), "]\n");
}

absl::Status LogStore::ValidateJobId(const std::string& job_id) {
  if (IsPathSafeId(job_id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("log job_id: \"", job_id, "\" is not a valid job id (", kPathSafeIdRule, ")"));
}

std::string LogStore::JobDir(const std::string& job_id) const {
  return absl::StrCat(root_, "/", job_id);
}

std::string LogStore::AttemptDir(const std::string& job_id, int32_t attempt) const {
  return absl::StrCat(JobDir(job_id), "/attempt-", attempt);
}

std::string LogStore::LogPath(const Key& key) const {
  return absl::StrCat(AttemptDir(std::get<0>(key), std::get<1>(key)), "/rank-", std::get<2>(key),
                      ".log");
}

absl::StatusOr<int64_t> LogStore::SizeLocked(const Key& key) {
  auto it = sizes_.find(key);
  if (it != sizes_.end()) return it->second;
  const std::string path = LogPath(key);
  struct stat st;
  int64_t size = 0;
  if (::stat(path.c_str(), &st) == 0) {
    size = static_cast<int64_t>(st.st_size);
  } else if (errno != ENOENT && errno != ENOTDIR) {
    return ErrnoError("cannot stat log", path, errno);
  }
  sizes_[key] = size;
  return size;
}

absl::Status LogStore::WriteLocked(const Key& key, const char* data, size_t size) {
  if (size == 0) return absl::OkStatus();
  const std::string dir = AttemptDir(std::get<0>(key), std::get<1>(key));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create log directory ", dir, ": ",
                                                  ec.message()));
  const std::string path = LogPath(key);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot open log", path, errno);
  const int err = WriteAll(fd, data, size);
  struct stat st;
  const bool stat_ok = ::fstat(fd, &st) == 0;
  ::close(fd);
  if (stat_ok) {
    sizes_[key] = static_cast<int64_t>(st.st_size);
  } else {
    sizes_.erase(key);  // re-read on next use
  }
  if (err != 0) return ErrnoError("cannot write log", path, err);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LogStore::Append(const v1::LogChunk& chunk) {
  absl::Status s = ValidateIds(chunk.job_id(), chunk.attempt(), chunk.world_rank());
  if (!s.ok()) return s;
  if (chunk.offset() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("log offset: ", chunk.offset(), " is negative"));
  }
  const Key key{chunk.job_id(), chunk.attempt(), chunk.world_rank()};
  const int64_t end = chunk.offset() + static_cast<int64_t>(chunk.data().size());
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<int64_t> size = SizeLocked(key);
  if (!size.ok()) return size.status();
  const int64_t cap = options_.max_bytes_per_rank;
  if (*size >= cap) return std::max(end, *size);  // truncated: accept and drop
  if (chunk.offset() > *size) return *size;       // a gap: resend from what is held
  if (end <= *size) return *size;                 // nothing new
  const char* fresh = chunk.data().data() + (*size - chunk.offset());
  const int64_t fresh_size = end - *size;
  const int64_t room = cap - *size;
  if (fresh_size < room) {
    s = WriteLocked(key, fresh, static_cast<size_t>(fresh_size));
    if (!s.ok()) return s;
    return sizes_[key];
  }
  // Keep what fits, then the marker; the log holds no more from now on.
  std::string tail(fresh, static_cast<size_t>(room));
  if (!tail.empty() && tail.back() != '\n') tail += '\n';
  tail += TruncationMarker(cap);
  s = WriteLocked(key, tail.data(), tail.size());
  if (!s.ok()) return s;
  return std::max(end, sizes_[key]);
}

absl::StatusOr<int64_t> LogStore::Size(const std::string& job_id, int32_t attempt,
                                       int32_t rank) {
  absl::Status s = ValidateIds(job_id, attempt, rank);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  return SizeLocked(Key{job_id, attempt, rank});
}

absl::StatusOr<v1::LogChunk> LogStore::Read(const std::string& job_id, int32_t attempt,
                                            int32_t rank, int64_t offset, int64_t max_bytes) {
  absl::Status s = ValidateIds(job_id, attempt, rank);
  if (!s.ok()) return s;
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("log offset: ", offset, " is negative"));
  }
  if (max_bytes <= 0) max_bytes = kDefaultReadBytes;
  max_bytes = std::min(max_bytes, kMaxReadBytes);
  v1::LogChunk out;
  out.set_job_id(job_id);
  out.set_attempt(attempt);
  out.set_world_rank(rank);
  out.set_offset(offset);
  const Key key{job_id, attempt, rank};
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<int64_t> size = SizeLocked(key);
  if (!size.ok()) return size.status();
  if (offset >= *size) return out;
  const std::string path = LogPath(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open log", path, errno);
  std::string data(static_cast<size_t>(std::min(max_bytes, *size - offset)), '\0');
  size_t got = 0;
  while (got < data.size()) {
    const ssize_t n = ::pread(fd, &data[got], data.size() - got, offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoError("cannot read log", path, err);
    }
    if (n == 0) break;  // shorter than cached (changed behind our back)
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(got);
  out.set_data(std::move(data));
  return out;
}

absl::StatusOr<std::vector<int32_t>> LogStore::Ranks(const std::string& job_id,
                                                     int32_t attempt) {
  absl::Status s = ValidateIds(job_id, attempt, 0);
  if (!s.ok()) return s;
  std::vector<int32_t> ranks;
  const std::string dir = AttemptDir(job_id, attempt);
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) {
      return ranks;
    }
    return absl::InternalError(absl::StrCat("cannot list logs in ", dir, ": ", ec.message()));
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    absl::string_view name = it->path().filename().native();
    int32_t rank;
    if (absl::ConsumePrefix(&name, "rank-") && absl::ConsumeSuffix(&name, ".log") &&
        absl::SimpleAtoi(name, &rank) && rank >= 0) {
      ranks.push_back(rank);
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list logs in ", dir, ": ", ec.message()));
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

absl::Status LogStore::DeleteJob(const std::string& job_id) {
  absl::Status s = ValidateJobId(job_id);
  if (!s.ok()) return s;
  const std::string dir = JobDir(job_id);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = sizes_.begin(); it != sizes_.end();) {
    it = std::get<0>(it->first) == job_id ? sizes_.erase(it) : std::next(it);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove logs in ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace dhp::controller
