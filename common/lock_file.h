// LockFile: an exclusive, advisory lock on a file (flock), held for the object's lifetime, so
// that two processes cannot use one data directory at once. The kernel drops the lock when the
// process exits, however it exits, so a crash leaves no stale lock behind.
//
//   absl::StatusOr<LockFile> lock = LockFile::Acquire(data_dir + "/dhp-controller.lock");
//   if (!lock.ok()) ...  // FAILED_PRECONDITION naming the holder's pid
//
// The file holds the holder's pid, for the message a second process gets.
#ifndef DHP_COMMON_LOCK_FILE_H_
#define DHP_COMMON_LOCK_FILE_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace dhp {

class LockFile {
 public:
  // Creates `path` if needed and locks it. FAILED_PRECONDITION when another open file holds
  // the lock (this process's or another's); UNAVAILABLE when the file cannot be opened.
  static absl::StatusOr<LockFile> Acquire(const std::string& path);

  LockFile(LockFile&& other) noexcept;
  LockFile& operator=(LockFile&& other) noexcept;
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;
  ~LockFile();  // unlocks

  const std::string& path() const { return path_; }

 private:
  LockFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace dhp

#endif  // DHP_COMMON_LOCK_FILE_H_
