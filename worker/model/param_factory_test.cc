#include "worker/model/param_factory.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <utility>
#include <vector>

#include "common/model_presets.h"
#include "worker/model/layers.h"
#include "worker/model/param_shapes.h"
#include "worker/model/tensor_source.h"
#include "worker/model/vision_model.h"

namespace dhp {
namespace {

const VisionConfig& TinyVision() { return FindModelPreset("tiny")->vision; }

// The default path keeps the values torch::nn modules had: same tensors, same generator state
// afterwards (what a later InitQwenWeights(module, std) draws its seed from).
TEST(ParamFactoryTest, LibTorchDefaultInitIsWhatTorchNnModulesHold) {
  at::manual_seed(11);
  torch::nn::Linear linear(torch::nn::LinearOptions(6, 5));
  torch::nn::Conv3d conv(torch::nn::Conv3dOptions(3, 4, {2, 2, 2}).stride({2, 2, 2}).bias(false));
  const at::Tensor next_old = at::rand({8});

  at::manual_seed(11);
  Dense dense(6, 5, /*bias=*/true, LibTorchDefaultInit());
  const at::Tensor conv_weight =
      MakeParam(LibTorchDefaultInit(), "weight", {4, 3, 2, 2, 2}, ParamRole::kLinearWeight);
  const at::Tensor next_new = at::rand({8});

  EXPECT_TRUE(at::equal(dense->weight, linear->weight));
  EXPECT_TRUE(at::equal(dense->bias, linear->bias));
  EXPECT_TRUE(at::equal(conv_weight, conv->weight));
  EXPECT_TRUE(at::equal(next_new, next_old));
  const at::Tensor x = at::randn({3, 6});
  EXPECT_TRUE(at::equal(dense(x), linear(x)));
  EXPECT_TRUE(at::equal(MakeParam(LibTorchDefaultInit(), "weight", {7}, ParamRole::kNormWeight),
                        at::ones({7})));
}

// Names and shapes asked for are the registered parameters' and the checkpoint table's, in order.
TEST(ParamFactoryTest, TheTowerAsksForItsCheckpointNamesInOrder) {
  std::vector<ParamShape> asked;
  const ParamFactory record = [&asked](const ParamRequest& r) {
    asked.push_back({r.name, r.shape});
    return at::zeros(r.shape);
  };
  VisionTransformer tower(TinyVision(), record);
  const std::vector<ParamShape> table = VisionParamShapes(TinyVision(), "");
  auto params = tower->named_parameters(/*recurse=*/true);
  ASSERT_EQ(asked.size(), table.size());
  ASSERT_EQ(params.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(asked[i].name, table[i].name);
    EXPECT_EQ(asked[i].shape, table[i].shape) << table[i].name;
    EXPECT_EQ(params[i].key(), table[i].name);
    EXPECT_EQ(params[i].value().sizes().vec(), table[i].shape) << table[i].name;
  }
}

TEST(ParamFactoryTest, WholeTensorsHoldsTheSourcesTensorsInTheirDtype) {
  at::manual_seed(2);
  VisionTransformer ref(TinyVision());
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : ref->named_parameters()) {
    named.emplace_back("visual." + item.key(), item.value());
  }
  const NamedTensorSource fp32(named);
  const CastTensorSource bf16(fp32, at::kBFloat16);
  VisionTransformer tower(TinyVision(), WholeTensors(bf16, "visual."));
  auto want = ref->named_parameters();
  for (const auto& item : tower->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), at::kBFloat16) << item.key();
    EXPECT_TRUE(item.value().requires_grad()) << item.key();
    EXPECT_TRUE(at::equal(item.value(), want[item.key()].to(at::kBFloat16))) << item.key();
  }
}

TEST(ParamFactoryTest, WholeTensorsRejectsAMissingOrMisshapedTensor) {
  const VisionConfig& c = TinyVision();
  std::vector<ParamShape> shapes = VisionParamShapes(c);
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const ParamShape& p : shapes) named.emplace_back(p.name, at::zeros(p.shape));
  named.back().second = at::zeros({1});  // merger.mlp.2.bias
  EXPECT_THROW(VisionTransformer(c, WholeTensors(NamedTensorSource(named), "visual.")),
               c10::ValueError);
  named.pop_back();
  EXPECT_THROW(VisionTransformer(c, WholeTensors(NamedTensorSource(named), "visual.")),
               c10::ValueError);
}

}  // namespace
}  // namespace dhp
