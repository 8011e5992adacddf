#include "worker/ckpt/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "worker/ckpt/crc32c.h"

namespace dhp::ckpt {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

std::string JoinPath(const std::string& dir, const std::string& file) {
  if (dir.empty()) return file;
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

std::string ParentOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Closes the descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status FsyncPath(const std::string& path, bool directory) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0)));
  if (fd.get() < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", ErrnoText()));
  if (::fsync(fd.get()) != 0) {
    return absl::InternalError(absl::StrCat("fsync of ", path, " failed: ", ErrnoText()));
  }
  return absl::OkStatus();
}

absl::Status MissingOrUnreadable(const std::string& path) {
  if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " is missing"));
  return absl::PermissionDeniedError(absl::StrCat("cannot read ", path, ": ", ErrnoText()));
}

// Size and CRC-32C of the open file; fsyncs it first when `sync`.
absl::StatusOr<ShardInfo> Checksum(int fd, const std::string& path, bool sync) {
  if (sync && ::fsync(fd) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("fsync of ", path, " failed (disk full?): ", ErrnoText()));
  }
  ShardInfo info;
  uint32_t crc = 0;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat("reading ", path, " failed: ", ErrnoText()));
    }
    if (n == 0) break;
    crc = Crc32cExtend(crc, buf.data(), static_cast<size_t>(n));
    info.size_bytes += n;
  }
  info.crc32c = Crc32cHex(crc);
  return info;
}

}  // namespace

std::string TempPathOf(const std::string& dir, const std::string& file) {
  return JoinPath(dir, file) + ".tmp";
}

absl::Status MakeDurableDirs(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("checkpoint directory is empty");
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  const std::string parent = ParentOf(dir);
  if (parent != dir) {
    if (absl::Status s = MakeDurableDirs(parent); !s.ok()) return s;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {  // another rank may have won
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory ", dir, ": ", ErrnoText()));
  }
  return FsyncPath(parent, /*directory=*/true);
}

absl::StatusOr<ShardInfo> PublishShard(const std::string& dir, const std::string& file) {
  const std::string tmp = TempPathOf(dir, file);
  const std::string path = JoinPath(dir, file);
  absl::StatusOr<ShardInfo> info;
  {
    Fd fd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return MissingOrUnreadable(tmp);
    info = Checksum(fd.get(), tmp, /*sync=*/true);
  }
  if (!info.ok()) return info.status();
  info->file = file;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ErrnoText()));
  }
  if (absl::Status s = FsyncPath(dir.empty() ? "." : dir, /*directory=*/true); !s.ok()) return s;
  return info;
}

absl::StatusOr<WrittenShard> WriteShardWith(
    const std::string& dir, const std::string& file,
    const std::function<absl::Status(const std::string& temp_path)>& write_temp) {
  const auto t0 = std::chrono::steady_clock::now();
  if (absl::Status s = MakeDurableDirs(dir); !s.ok()) return s;
  if (absl::Status s = write_temp(TempPathOf(dir, file)); !s.ok()) return s;
  absl::StatusOr<ShardInfo> info = PublishShard(dir, file);
  if (!info.ok()) return info.status();
  WrittenShard out;
  out.info = std::move(*info);
  out.write_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

absl::StatusOr<WrittenShard> WriteShard(const std::string& dir, const std::string& file,
                                        const std::vector<StTensorData>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  // WriteSafetensors itself writes <temp>.tmp and renames it to <temp>.
  return WriteShardWith(dir, file, [&](const std::string& temp) {
    return WriteSafetensors(temp, tensors, metadata);
  });
}

absl::StatusOr<ShardInfo> DescribeShard(const std::string& dir, const std::string& file) {
  const std::string path = JoinPath(dir, file);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return MissingOrUnreadable(path);
  absl::StatusOr<ShardInfo> info = Checksum(fd.get(), path, /*sync=*/false);
  if (info.ok()) info->file = file;
  return info;
}

absl::Status VerifyShard(const std::string& dir, const ShardInfo& expected) {
  const std::string path = JoinPath(dir, expected.file);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return MissingOrUnreadable(path);
  if (static_cast<int64_t>(st.st_size) != expected.size_bytes) {
    return absl::DataLossError(absl::StrCat(path, " has ", static_cast<int64_t>(st.st_size),
                                            " bytes, expected ", expected.size_bytes));
  }
  absl::StatusOr<ShardInfo> actual = DescribeShard(dir, expected.file);
  if (!actual.ok()) return actual.status();
  if (actual->size_bytes != expected.size_bytes) {  // changed since the stat
    return absl::DataLossError(absl::StrCat(path, " has ", actual->size_bytes,
                                            " bytes, expected ", expected.size_bytes));
  }
  if (actual->crc32c != absl::AsciiStrToLower(expected.crc32c)) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch: expected ",
                                            expected.crc32c, ", file has ", actual->crc32c));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> OpenShard(const std::string& dir,
                                                           const ShardInfo& expected) {
  if (absl::Status s = VerifyShard(dir, expected); !s.ok()) return s;
  return SafetensorsFile::Open(JoinPath(dir, expected.file));
}

}  // namespace dhp::ckpt
