#include "worker/model/weights.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace dhp {
namespace {

std::string TempDir(const std::string& name) {
  std::string dir = testing::TempDir() + "/weights_test/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(WeightsTest, RoundTripsF32F16Bf16Exactly) {
  at::manual_seed(0);
  const std::string dir = TempDir("rt");
  NamedTensors saved = {{"f32", at::randn({3, 4})},
                        {"f16", at::randn({5}).to(at::kHalf)},
                        {"bf16", at::randn({2, 2, 2}).to(at::kBFloat16)},
                        {"ids", at::arange(6, at::kLong)}};
  ASSERT_TRUE(SaveWeights(dir + "/model.safetensors", saved).ok());
  absl::StatusOr<std::unique_ptr<CheckpointDir>> ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const auto& [name, tensor] : saved) {
    const SafetensorsFile* f = (*ckpt)->FileOf(name);
    ASSERT_NE(f, nullptr) << name;
    at::Tensor back = ReadTensor(*f, f->tensors().at(name));
    EXPECT_EQ(back.scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(at::equal(back, tensor)) << name;
  }
}

TEST(WeightsTest, LoadsByNameConvertingDtype) {
  const std::string dir = TempDir("load");
  at::Tensor w = at::arange(6, at::kFloat).reshape({2, 3});
  ASSERT_TRUE(SaveWeights(dir + "/model.safetensors", {{"layer.weight", w.to(at::kBFloat16)}}).ok());
  auto ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  at::Tensor target = at::zeros({2, 3});
  absl::StatusOr<LoadReport> report = LoadWeights(**ckpt, {{"layer.weight", target}}, true);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->loaded, 1);
  EXPECT_TRUE(report->clean());
  EXPECT_TRUE(at::equal(target, w));  // small integers are exact in bf16
}

TEST(WeightsTest, StrictModeNamesEveryMismatchAndChangesNothing) {
  const std::string dir = TempDir("strict");
  ASSERT_TRUE(SaveWeights(dir + "/model.safetensors",
                          {{"a", at::ones({2})}, {"b", at::ones({3, 3})}, {"extra", at::ones({1})}})
                  .ok());
  auto ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  at::Tensor a = at::zeros({2}), b = at::zeros({3, 4}), c = at::zeros({5});
  NamedTensors params = {{"a", a}, {"b", b}, {"c", c}};
  absl::StatusOr<LoadReport> strict = LoadWeights(**ckpt, params, true);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().message(),
            "checkpoint does not match the model: 1 missing (c); 1 unexpected (extra); 1 with "
            "the wrong shape (b: checkpoint [3, 3], model [3, 4])");
  EXPECT_EQ(a.sum().item<float>(), 0.0f);  // nothing was loaded

  absl::StatusOr<LoadReport> lenient = LoadWeights(**ckpt, params, false);
  ASSERT_TRUE(lenient.ok());
  EXPECT_EQ(lenient->loaded, 1);
  EXPECT_EQ(lenient->missing, std::vector<std::string>{"c"});
  EXPECT_EQ(lenient->unexpected, std::vector<std::string>{"extra"});
  EXPECT_EQ(a.sum().item<float>(), 2.0f);
  EXPECT_EQ(b.sum().item<float>(), 0.0f);
}

TEST(WeightsTest, OnlyF32F16AndBf16AreParameterDtypes) {
  for (StDtype d : {StDtype::kF32, StDtype::kF16, StDtype::kBF16}) {
    EXPECT_TRUE(IsParameterDtype(d)) << StDtypeName(d);
    EXPECT_EQ(ParameterDtypeProblem("w", d), "");
  }
  for (StDtype d : {StDtype::kF64, StDtype::kI64, StDtype::kI32, StDtype::kI8, StDtype::kU8,
                    StDtype::kBool}) {
    EXPECT_FALSE(IsParameterDtype(d)) << StDtypeName(d);
  }
  EXPECT_EQ(ParameterDtypeProblem("model.embed_tokens.weight", StDtype::kI64),
            "model.embed_tokens.weight: stored as I64; a parameter must be F32, F16 or BF16");
}

TEST(WeightsTest, IntegerTensorsAreRefusedNotConvertedIntoParameters) {
  const std::string dir = TempDir("int");
  const float ones[2] = {1, 1};
  const int64_t ids[3] = {1, 2, 3};
  const uint8_t bytes[4] = {1, 2, 3, 4};
  const bool flags[2] = {true, false};
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors",
                               {{"a", StDtype::kF32, {2}, ones, sizeof ones},
                                {"ids", StDtype::kI64, {3}, ids, sizeof ids},
                                {"pixels", StDtype::kU8, {4}, bytes, sizeof bytes},
                                {"flags", StDtype::kBool, {2}, flags, sizeof flags}})
                  .ok());
  auto ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  at::Tensor a = at::zeros({2}), i = at::zeros({3}), p = at::zeros({4}), f = at::zeros({2});
  NamedTensors params = {{"a", a}, {"ids", i}, {"pixels", p}, {"flags", f}};
  absl::StatusOr<LoadReport> strict = LoadWeights(**ckpt, params, true);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().message(),
            "checkpoint does not match the model: 3 of another dtype (ids: stored as I64, "
            "pixels: stored as U8, flags: stored as BOOL); a parameter must be F32, F16 or BF16");
  EXPECT_EQ(a.sum().item<float>(), 0.0f);  // nothing was loaded

  absl::StatusOr<LoadReport> lenient = LoadWeights(**ckpt, params, false);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(lenient->loaded, 1);
  EXPECT_EQ(lenient->wrong_dtype.size(), 3u);
  EXPECT_EQ(a.sum().item<float>(), 2.0f);
  EXPECT_EQ(i.abs().sum().item<float>() + p.abs().sum().item<float>() +
                f.abs().sum().item<float>(),
            0.0f);  // the integer tensors were skipped, not converted
}

// The resident bytes of the mapping that holds `addr` (/proc/self/smaps), -1 when none does.
int64_t MappingRssBytes(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(addr);
  while (std::getline(smaps, line)) {
    unsigned long long begin = 0, end = 0;
    long long kb = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &begin, &end) == 2) {
      inside = begin <= at && at < end;
    } else if (inside && std::sscanf(line.c_str(), "Rss: %lld kB", &kb) == 1) {
      return kb * 1024;
    }
  }
  return -1;
}

TEST(WeightsTest, ReadingDropsTheMappedPagesAndKeepsTheValues) {
  const std::string dir = TempDir("release");
  at::Tensor w = at::arange(1024 * 1024, at::kFloat).reshape({1024, 1024});  // 4 MiB
  ASSERT_TRUE(SaveWeights(dir + "/model.safetensors", {{"w", w}}).ok());
  auto ckpt = CheckpointDir::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const SafetensorsFile& f = *(*ckpt)->FileOf("w");
  const StTensorInfo& info = f.tensors().at("w");
  for (int round = 0; round < 2; ++round) {  // the second round maps the dropped pages again
    EXPECT_TRUE(at::equal(ReadTensor(f, info), w));
    EXPECT_LT(MappingRssBytes(f.data(info)), 64 << 10);  // the header's page at most
    // Columns 3..7: 1024 runs of 20 bytes, one in every page of the tensor.
    EXPECT_TRUE(at::equal(ReadTensorSlice(f, info, 1, 3, 5), w.narrow(1, 3, 5)));
    EXPECT_LT(MappingRssBytes(f.data(info)), 64 << 10);
    EXPECT_TRUE(at::equal(ReadTensorSlice(f, info, 0, 1000, 24), w.narrow(0, 1000, 24)));
    EXPECT_LT(MappingRssBytes(f.data(info)), 64 << 10);
  }
}

}  // namespace
}  // namespace dhp
