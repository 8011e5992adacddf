// The tiny Qwen2.5-VL on a device and dtype against its own CPU fp32 run (same weights, same
// packed batch of three images): the loss, every logit and every parameter's gradient.
//
// The device comes from DHP_TEST_DEVICE (default "cpu"; tools/gpu-check.sh sets "cuda"):
// - fp32 on a GPU: element-wise |x - ref| <= 1e-4 + 1e-4 |ref| for logits, 1e-5 relative for
//   the loss, 1e-4 relative (L2) per gradient. Same math, other kernels and summation order
//   (cuBLAS, no TF32: LibTorch leaves it off for matmuls).
// - bf16: on a GPU as training runs it (CUDA autocast over fp32 weights, compat::
//   AutocastGuard); on the CPU the model and pixels are cast to bf16 (not autocast: all-bf16 is
//   the harsher case). Bounds from bf16's 8-bit significand (relative rounding 2^-9 per
//   operation, compounded over the tiny model's vision and text layers): loss 5e-3 relative,
//   logits |x - ref| <= 0.05 + 0.02 |ref|, gradients 0.15 relative (L2) each: a norm weight's
//   gradient sums over every token, and in all-bf16 on the CPU that sum is rounded too.
//   Measured (all bf16, CPU): LibTorch 2.11 loss 2.6e-5, logits 0.020 max abs, gradients 0.022
//   worst; LibTorch 1.13 loss 6.8e-5, logits 0.021, gradients 0.067 (visual.blocks.2.norm2).
// The measured errors are printed beside the bounds.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "common/model_presets.h"
#include "worker/model/layers.h"
#include "worker/model/param_init.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/torch_compat.h"
#include "worker/rank/synthetic_batch.h"

namespace dhp {
namespace {

const ModelPreset& Tiny() { return *FindModelPreset("tiny"); }

Qwen2_5_VL MakeModel() {
  at::manual_seed(7);
  Qwen2_5_VL m(Tiny());
  InitQwenWeights(*m, 0.05);
  return m;
}

PackedBatch MakeBatch() {
  absl::StatusOr<PackedBatch> b = MakePositionedSyntheticBatch(Tiny(), {{1, 4, 6}, {1, 10, 10}, {1, 8, 4}}, 3);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *b : PackedBatch{};
}

struct Pass {
  at::Tensor loss, logits;  // fp32, on the CPU
  std::map<std::string, at::Tensor> grads;
};

// Forward + backward of `m` on `b`; `autocast` runs it under CUDA bf16 autocast.
Pass ForwardBackward(Qwen2_5_VL& m, const PackedBatch& b, bool autocast) {
  Pass r;
  at::Tensor logits, loss;
  {
    std::optional<compat::AutocastGuard> guard;
    if (autocast) guard.emplace(at::kCUDA, at::kBFloat16);
    logits = m->Logits(b);
    loss = m->Loss(b);
  }
  loss.backward();
  r.loss = loss.detach().to(at::kCPU, at::kFloat);
  r.logits = logits.detach().to(at::kCPU, at::kFloat);
  for (const auto& item : m->named_parameters()) {
    const at::Tensor& g = item.value().grad();
    r.grads[item.key()] = g.defined() ? g.to(at::kCPU, at::kFloat) : at::zeros({0});
  }
  return r;
}

struct Bounds {
  double loss_rtol, logit_atol, logit_rtol, grad_rtol;
};

void ExpectClose(const Pass& got, const Pass& ref, const Bounds& b, const std::string& what) {
  const double loss_err = std::abs(got.loss.item<double>() - ref.loss.item<double>()) /
                          std::abs(ref.loss.item<double>());
  const at::Tensor diff = (got.logits - ref.logits).abs();
  const double logit_excess =
      (diff - (b.logit_atol + b.logit_rtol * ref.logits.abs())).max().item<double>();
  double worst_grad = 0;
  std::string worst;
  for (const auto& [name, g] : ref.grads) {
    const at::Tensor& h = got.grads.at(name);
    ASSERT_EQ(h.sizes(), g.sizes()) << name;
    const double scale = g.norm().item<double>();
    const double e = (h - g).norm().item<double>() / (scale > 0 ? scale : 1.0);
    if (e > worst_grad) worst_grad = e, worst = name;
  }
  std::printf("%s: loss rel err %.3g (bound %.3g); logits max abs diff %.3g (bound %.3g + %.3g "
              "|ref|); worst gradient rel err %.3g in %s (bound %.3g)\n",
              what.c_str(), loss_err, b.loss_rtol, diff.max().item<double>(), b.logit_atol,
              b.logit_rtol, worst_grad, worst.c_str(), b.grad_rtol);
  EXPECT_LE(loss_err, b.loss_rtol) << what;
  EXPECT_LE(logit_excess, 0.0) << what << ": some logit is outside the element-wise bound";
  EXPECT_LE(worst_grad, b.grad_rtol) << what << ": " << worst;
}

class DeviceParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    device_ = TestDeviceFromEnv();
    if (device_.is_cuda() && !at::hasCUDA()) GTEST_FAIL() << "DHP_TEST_DEVICE=cuda: no GPU";
    batch_ = MakeBatch();
    Qwen2_5_VL ref_model = MakeModel();
    ref_ = ForwardBackward(ref_model, batch_, /*autocast=*/false);
  }
  at::Device device_ = at::kCPU;
  PackedBatch batch_;
  Pass ref_;
};

TEST_F(DeviceParityTest, Fp32OnDeviceMatchesCpu) {
  if (!device_.is_cuda()) GTEST_SKIP() << "fp32 on the CPU is the reference itself";
  Qwen2_5_VL m = MakeModel();
  m->to(device_);
  ExpectClose(ForwardBackward(m, BatchOnDevice(batch_, device_), false), ref_,
              Bounds{1e-5, 1e-4, 1e-4, 1e-4}, "fp32 on " + device_.str());
}

TEST_F(DeviceParityTest, Bf16OnDeviceTracksFp32) {
  Qwen2_5_VL m = MakeModel();
  const bool cuda = device_.is_cuda();
  // CUDA: fp32 weights under bf16 autocast (training's mode); CPU: everything in bf16.
  m->to(device_, cuda ? at::kFloat : at::kBFloat16);
  const PackedBatch b = BatchOnDevice(batch_, device_, cuda ? at::kFloat : at::kBFloat16);
  ExpectClose(ForwardBackward(m, b, /*autocast=*/cuda), ref_, Bounds{5e-3, 0.05, 0.02, 0.15},
              std::string(cuda ? "bf16 autocast on " : "bf16 weights on ") + device_.str());
}

}  // namespace
}  // namespace dhp
