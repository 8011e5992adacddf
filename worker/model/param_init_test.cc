#include "worker/model/param_init.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "common/model_presets.h"
#include "worker/model/param_shapes.h"
#include "worker/model/qwen2_5_vl.h"

namespace dhp {
namespace {

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

TEST(ParamShapesTest, TheTableIsTheModulesNamedParametersInOrder) {
  Qwen2_5_VL model(Tiny());
  const std::vector<ParamShape> table = QwenParamShapes(Tiny());
  auto params = model->named_parameters(/*recurse=*/true);
  ASSERT_EQ(table.size(), params.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].name, params[i].key());
    EXPECT_EQ(table[i].shape, params[i].value().sizes().vec()) << table[i].name;
  }
}

TEST(ParamShapesTest, The32BTableCountsThePublishedSize) {
  const ModelPreset& p = *FindModelPreset("qwen2_5_vl_32b");
  int64_t total = 0;
  for (const ParamShape& s : QwenParamShapes(p)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    total += n;
  }
  EXPECT_NEAR(total / 1e9, p.published_params_billions, 0.6);
}

TEST(InitSliceTest, EverySliceEqualsTheSliceOfTheWholeTensor) {
  const std::vector<int64_t> shape = {37, 21};
  const at::Tensor whole = InitSlice(7, "w.weight", shape, -1, 0, 0, 0.02);
  ASSERT_EQ(whole.sizes().vec(), shape);
  // Uneven row and column splits, as TP ranks take them.
  EXPECT_TRUE(at::equal(InitSlice(7, "w.weight", shape, 0, 5, 13, 0.02), whole.narrow(0, 5, 13)));
  EXPECT_TRUE(at::equal(InitSlice(7, "w.weight", shape, 1, 20, 1, 0.02), whole.narrow(1, 20, 1)));
  const std::vector<int64_t> conv = {4, 3, 2, 5, 5};
  const at::Tensor c = InitSlice(1, "p.weight", conv, -1, 0, 0, 0.5);
  EXPECT_TRUE(at::equal(InitSlice(1, "p.weight", conv, 2, 1, 1, 0.5), c.narrow(2, 1, 1)));
  EXPECT_TRUE(at::equal(InitSlice(1, "p.weight", conv, 0, 3, 1, 0.5), c.narrow(0, 3, 1)));
}

TEST(InitSliceTest, FollowsTheHuggingFaceRuleAndTheSeed) {
  const std::vector<int64_t> shape = {400, 500};
  const at::Tensor w = InitSlice(42, "a.weight", shape, -1, 0, 0, 0.02);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 2e-4);   // 2e5 draws: sd of the mean 4.5e-5
  EXPECT_NEAR(w.std().item<double>(), 0.02, 2e-4);
  EXPECT_LT(w.abs().max().item<double>(), 0.02 * 6);
  EXPECT_TRUE(at::equal(w, InitSlice(42, "a.weight", shape, -1, 0, 0, 0.02)));
  EXPECT_FALSE(at::equal(w, InitSlice(43, "a.weight", shape, -1, 0, 0, 0.02)));
  EXPECT_FALSE(at::equal(w, InitSlice(42, "b.weight", shape, -1, 0, 0, 0.02)));
  EXPECT_TRUE(at::equal(InitSlice(42, "a.bias", {9}, 0, 2, 3, 0.02), at::zeros({3})));
  EXPECT_TRUE(at::equal(InitSlice(42, "norm.weight", {9}, -1, 0, 0, 0.02), at::ones({9})));
  EXPECT_THROW(InitSlice(42, "a.weight", shape, 0, 399, 2, 0.02), c10::Error);
}

TEST(InitTensorSourceTest, MatchesInitQwenWeightsOfTheSingleRankModel) {
  Qwen2_5_VL model(Tiny());
  InitQwenWeights(*model, 0.02, /*seed=*/5);
  InitTensorSource src(QwenParamShapes(Tiny()), 5, 0.02,
                       at::TensorOptions().dtype(at::kBFloat16));
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    const at::Tensor s = src.Whole(item.key());
    EXPECT_EQ(s.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(s, p.detach().to(at::kBFloat16))) << item.key();
  }
  const at::Tensor rows = src.Slice("model.embed_tokens.weight", 0, 10, 7);
  EXPECT_TRUE(at::equal(rows, model->named_parameters()["model.embed_tokens.weight"]
                                  .detach()
                                  .narrow(0, 10, 7)
                                  .to(at::kBFloat16)));
  EXPECT_FALSE(src.Has("model.nothing"));
  EXPECT_THROW(src.Shape("model.nothing"), c10::Error);
}

}  // namespace
}  // namespace dhp
