#include "worker/ckpt/shard_file.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "worker/ckpt/crc32c.h"

namespace dhp::ckpt {
namespace {

using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/shard_file_test/" + name;
}

std::set<std::string> FilesIn(const std::string& dir) {
  std::set<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.insert(e->d_name);
    }
    closedir(d);
  }
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

class ShardFileTest : public ::testing::Test {
 protected:
  // Writes a two-tensor shard into a fresh (nested, not yet existing) directory.
  WrittenShard Write(const std::string& dir) {
    const std::vector<StTensorData> tensors = {
        {"b.weight", StDtype::kF32, {2, 3}, floats_, sizeof(floats_)},
        {"a.step", StDtype::kI64, {1}, &step_, sizeof(step_)},
    };
    absl::StatusOr<WrittenShard> w =
        WriteShard(dir, "rank-00001.safetensors", tensors, {{"step", "7"}, {"layout", "x"}});
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *w : WrittenShard{};
  }

  float floats_[6] = {1, 2, 3, 4, 5, 6};
  int64_t step_ = 7;
};

TEST_F(ShardFileTest, WritesAtomicallyAndDescribesTheWholeFile) {
  const std::string dir = TestDir("write") + "/ckpt/step-00000007";
  const WrittenShard w = Write(dir);
  EXPECT_EQ(w.info.file, "rank-00001.safetensors");
  EXPECT_GE(w.write_seconds, 0);
  // Only the published file remains: no .tmp left behind.
  EXPECT_EQ(FilesIn(dir), std::set<std::string>{"rank-00001.safetensors"});
  const std::string bytes = ReadAll(dir + "/rank-00001.safetensors");
  EXPECT_EQ(w.info.size_bytes, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(w.info.crc32c, Crc32cHex(Crc32c(bytes.data(), bytes.size())));
  absl::StatusOr<ShardInfo> described = DescribeShard(dir, "rank-00001.safetensors");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->crc32c, w.info.crc32c);
  EXPECT_EQ(described->size_bytes, w.info.size_bytes);

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = OpenShard(dir, w.info);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("step"), "7");
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const StTensorInfo& t = (*f)->tensors().at("b.weight");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp((*f)->data(t), floats_, sizeof(floats_)), 0);
}

TEST_F(ShardFileTest, RewritingReplacesTheFileAndAStaleTempFileIsHarmless) {
  const std::string dir = TestDir("rewrite");
  const WrittenShard first = Write(dir);
  WriteAll(TempPathOf(dir, "rank-00001.safetensors"), "debris of a crashed writer");
  floats_[0] = 42;
  const WrittenShard second = Write(dir);
  EXPECT_NE(first.info.crc32c, second.info.crc32c);
  EXPECT_TRUE(VerifyShard(dir, second.info).ok());
  EXPECT_EQ(FilesIn(dir), std::set<std::string>{"rank-00001.safetensors"});
}

TEST_F(ShardFileTest, ATruncatedFileIsRefusedBeforeParsing) {
  const std::string dir = TestDir("truncated");
  const WrittenShard w = Write(dir);
  const std::string path = dir + "/rank-00001.safetensors";
  const std::string bytes = ReadAll(path);
  WriteAll(path, bytes.substr(0, bytes.size() - 5));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f = OpenShard(dir, w.info);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(f.status().message(), path + " has " + std::to_string(bytes.size() - 5) +
                                      " bytes, expected " + std::to_string(bytes.size()));
}

TEST_F(ShardFileTest, AFlippedBitIsACheckSumMismatch) {
  const std::string dir = TestDir("flipped");
  const WrittenShard w = Write(dir);
  const std::string path = dir + "/rank-00001.safetensors";
  std::string bytes = ReadAll(path);
  bytes[bytes.size() - 3] ^= 0x10;  // inside the tensor data: the file still parses
  WriteAll(path, bytes);
  EXPECT_TRUE(SafetensorsFile::Open(path).ok());
  const absl::Status s = VerifyShard(dir, w.info);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), path + ": checksum mismatch: expected " + w.info.crc32c +
                             ", file has " + Crc32cHex(Crc32c(bytes.data(), bytes.size())));
  EXPECT_FALSE(OpenShard(dir, w.info).ok());
}

TEST_F(ShardFileTest, AMissingFileIsNamed) {
  const std::string dir = TestDir("missing");
  ShardInfo info{"rank-00003.safetensors", 100, "00000000"};
  const absl::Status s = VerifyShard(dir, info);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), dir + "/rank-00003.safetensors is missing");
}

TEST_F(ShardFileTest, UpperCaseExpectedChecksumIsAccepted) {
  const std::string dir = TestDir("upper");
  WrittenShard w = Write(dir);
  for (char& c : w.info.crc32c) c = static_cast<char>(std::toupper(c));
  EXPECT_TRUE(VerifyShard(dir, w.info).ok());
}

TEST_F(ShardFileTest, ADirectoryPathThatIsAFileIsAnError) {
  const std::string dir = TestDir("notadir");
  ASSERT_TRUE(MakeDurableDirs(dir).ok());
  WriteAll(dir + "/file", "x");
  const absl::Status s = MakeDurableDirs(dir + "/file");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("is not a directory"));
}

}  // namespace
}  // namespace dhp::ckpt
