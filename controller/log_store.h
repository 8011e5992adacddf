// LogStore: the output of every rank process, kept as plain files under a root directory,
//
//   <root>/<job_id>/attempt-<a>/rank-<r>.log
//
// Agents ship a rank's output in order as LogChunks (offset = where the bytes start in the
// rank's log); dhpctl and the REST gateway read it back by byte range. Append is idempotent
// per byte: a chunk that repeats bytes already held (an agent retrying after a lost reply)
// appends only what is new, and a chunk that starts past the end (bytes lost in between)
// writes nothing and returns the size held, so the agent resends from there.
//
// Each log is capped (options.max_bytes_per_rank, default 1 GiB): the bytes that fit are kept,
// then one marker line "[dhp: log truncated at 1 GiB]" is written and later output of that
// rank is accepted but dropped (Append returns at least the chunk's end, offset + size, so the
// agent moves on instead of resending).
//
// Sizes are cached in memory after the first touch of a log and re-read from the files after
// a restart, so the store needs no other state.
//
// Thread-safety: all methods are thread-safe; mu_ serialises every file operation and guards
// the size cache. It is called from gRPC/REST threads, never on the controller's loop.
#ifndef DHP_CONTROLLER_LOG_STORE_H_
#define DHP_CONTROLLER_LOG_STORE_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dhp/v1/service.pb.h"

namespace dhp::controller {

struct LogStoreOptions {
  int64_t max_bytes_per_rank = int64_t{1} << 30;  // output beyond this is dropped
};

class LogStore {
 public:
  static constexpr int64_t kDefaultReadBytes = 64 << 10;  // Read with max_bytes <= 0
  static constexpr int64_t kMaxReadBytes = 1 << 20;       // Read never returns more

  // `root` is created on first write if missing.
  explicit LogStore(std::string root, LogStoreOptions options = {});
  LogStore(const LogStore&) = delete;
  LogStore& operator=(const LogStore&) = delete;

  // Stores the part of chunk.data that lies beyond the log's current size (see above) and
  // returns the size now held. INVALID_ARGUMENT for an unsafe job id, attempt < 1, rank < 0
  // or offset < 0; INTERNAL when the file cannot be written (the message names it).
  absl::StatusOr<int64_t> Append(const v1::LogChunk& chunk);

  // Up to `max_bytes` (<= 0: kDefaultReadBytes; capped at kMaxReadBytes) of the log from
  // `offset`. A log that does not exist yet, or an offset at or past its end, reads as empty.
  absl::StatusOr<v1::LogChunk> Read(const std::string& job_id, int32_t attempt, int32_t rank,
                                    int64_t offset, int64_t max_bytes);

  // The size of a log (0 when it does not exist).
  absl::StatusOr<int64_t> Size(const std::string& job_id, int32_t attempt, int32_t rank);

  // The ranks of an attempt that have a log, ascending (empty when none).
  absl::StatusOr<std::vector<int32_t>> Ranks(const std::string& job_id, int32_t attempt);

  // Removes every log of a job. OK when it has none.
  absl::Status DeleteJob(const std::string& job_id);

  // "[dhp: log truncated at 1 GiB]\n" for the given cap.
  static std::string TruncationMarker(int64_t max_bytes);

  // OK when `job_id` is safe as one path component: 1-128 characters of [A-Za-z0-9_.-],
  // not containing "..". INVALID_ARGUMENT naming the value otherwise.
  static absl::Status ValidateJobId(const std::string& job_id);

 private:
  using Key = std::tuple<std::string, int32_t, int32_t>;  // job, attempt, rank

  std::string JobDir(const std::string& job_id) const;
  std::string AttemptDir(const std::string& job_id, int32_t attempt) const;
  std::string LogPath(const Key& key) const;
  // The cached size of a log, loading it from the file on first use.
  absl::StatusOr<int64_t> SizeLocked(const Key& key);
  // Appends `data` to the log's file; updates sizes_.
  absl::Status WriteLocked(const Key& key, const char* data, size_t size);

  const std::string root_;
  const LogStoreOptions options_;
  std::mutex mu_;                    // serialises file access; guards sizes_
  std::map<Key, int64_t> sizes_;     // bytes in each log file touched since start
};

}  // namespace dhp::controller

#endif  // DHP_CONTROLLER_LOG_STORE_H_
