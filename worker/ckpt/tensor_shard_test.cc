#include "worker/ckpt/tensor_shard.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace dhp::ckpt {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/tensor_shard_test/" + name;
}

TEST(TensorShardTest, RoundTripsTensorsOfEveryDtypeWithMetadata) {
  at::manual_seed(1);
  const NamedTensors in = {
      {"visual.w", at::randn({3, 4})},
      {"optim.step", at::tensor({int64_t{12}}, at::kLong)},
      {"text.h", at::randn({5}).to(at::kBFloat16)},
      {"scalar", at::tensor({2.5}, at::kFloat).reshape({})},
  };
  const std::string dir = TestDir("roundtrip");
  absl::StatusOr<WrittenShard> w =
      WriteTensorShard(dir, "rank-00000.safetensors", in, {{"step", "12"}});
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<LoadedShard> out = ReadTensorShard(dir, w->info);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->metadata.at("step"), "12");
  ASSERT_EQ(out->tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    bool found = false;
    for (const auto& [n, u] : out->tensors) {
      if (n != name) continue;
      found = true;
      EXPECT_EQ(u.scalar_type(), t.scalar_type()) << name;
      EXPECT_EQ(u.sizes(), t.sizes()) << name;
      EXPECT_TRUE(at::equal(u, t)) << name;
    }
    EXPECT_TRUE(found) << name;
  }
}

TEST(TensorShardTest, CorruptionIsReportedBeforeAnyTensorIsRead) {
  const std::string dir = TestDir("corrupt");
  absl::StatusOr<WrittenShard> w =
      WriteTensorShard(dir, "rank-00002.safetensors", {{"w", at::ones({64})}}, {});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string path = dir + "/rank-00002.safetensors";
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    bytes = s.str();
  }
  bytes[bytes.size() / 2 + 40] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  absl::StatusOr<LoadedShard> out = ReadTensorShard(dir, w->info);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(out.status().message().find("rank-00002.safetensors: checksum mismatch: expected " +
                                        w->info.crc32c + ", file has "),
            std::string::npos)
      << out.status();
}

}  // namespace
}  // namespace dhp::ckpt
