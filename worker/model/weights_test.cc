#include "worker/model/weights.h"

#include <filesystem>

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

}  // namespace
}  // namespace dhp
