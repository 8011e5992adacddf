// Issue 13's "a rank of the 32B example config allocates only its shard", shown without
// allocating 32B: text rank 0 of the 32B config's TP 8, a vision rank under Ulysses (the whole
// tower) and a vision tensor-parallel rank of degree 8 are built from a source that yields
// `meta` tensors (shapes and dtypes, no storage), through the same constructors dhp-rank uses.
// Their parameters, and every byte they asked the source for, equal the memory planner's count
// for that rank (common/memory_plan.h TextParamsPerRank, VisionParamsPerRank); a parameter made
// any other way (a default-initialised torch::nn module, a full-size temporary) would be a CPU
// fp32 tensor and fail the checks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/memory_plan.h"
#include "common/model_presets.h"
#include "worker/comm/failing_communicator.h"
#include "worker/model/param_factory.h"
#include "worker/model/param_shapes.h"
#include "worker/model/tensor_source.h"
#include "worker/model/vision_model.h"
#include "worker/parallel/text_tp_model.h"
#include "worker/parallel/vision_tp.h"

namespace dhp {
namespace {

// Full shapes from param_shapes.h; every slice is an empty `meta` tensor of the slice's shape.
// Counts the elements asked for.
class MetaSource : public TensorSource {
 public:
  MetaSource(const std::vector<ParamShape>& shapes, at::ScalarType dtype) : dtype_(dtype) {
    for (const ParamShape& p : shapes) shapes_[p.name] = p.shape;
  }
  std::vector<int64_t> Shape(const std::string& name) const override {
    auto it = shapes_.find(name);
    TORCH_CHECK_VALUE(it != shapes_.end(), "unknown tensor ", name);
    return it->second;
  }
  bool Has(const std::string& name) const override { return shapes_.count(name) > 0; }
  at::Tensor Slice(const std::string& name, int64_t dim, int64_t start,
                   int64_t length) const override {
    std::vector<int64_t> shape = Shape(name);
    CheckSliceBounds(name, shape, dim, start, length);
    if (dim >= 0) shape[dim] = length;
    at::Tensor t = at::empty(shape, at::TensorOptions().device(at::kMeta).dtype(dtype_));
    asked_ += t.numel();
    return t;
  }
  int64_t asked() const { return asked_; }

 private:
  at::ScalarType dtype_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  mutable int64_t asked_ = 0;
};

int64_t Numel(const std::vector<ParamShape>& shapes) {
  int64_t n = 0;
  for (const ParamShape& p : shapes) {
    int64_t e = 1;
    for (int64_t d : p.shape) e *= d;
    n += e;
  }
  return n;
}

TEST(ShardMetaTest, TextRankOf32BAtTp8HoldsOnlyItsShard) {
  const ModelPreset& preset = *FindModelPreset("qwen2_5_vl_32b");
  const std::vector<ParamShape> shapes = TextParamShapes(preset.text);
  const int64_t full = Numel(shapes);
  const int64_t planned = TextParamsPerRank(preset.text, 8);
  for (int rank : {0, 7}) {
    MetaSource source(shapes, at::kBFloat16);
    comm::FailingCommunicator tp("text.tp0", rank, 8);
    absl::StatusOr<tp::TextTpModel> model = tp::CreateTextTpModel(preset.text, source, tp);
    ASSERT_TRUE(model.ok()) << model.status();
    int64_t numel = 0, bytes = 0;
    for (const at::Tensor& p : (*model)->parameters()) {
      EXPECT_TRUE(p.is_meta());
      EXPECT_EQ(p.scalar_type(), at::kBFloat16);
      numel += p.numel();
      bytes += p.numel() * static_cast<int64_t>(p.element_size());
    }
    std::printf("32B text rank %d of TP 8: %lld parameters (%.2f GiB bf16) of %lld (%.2f%%); "
                "planner %lld; asked the source for %lld elements\n",
                rank, static_cast<long long>(numel), bytes / double(1LL << 30),
                static_cast<long long>(full), 100.0 * numel / full,
                static_cast<long long>(planned), static_cast<long long>(source.asked()));
    // No full-size tensor and no temporary: what was read is what is kept.
    EXPECT_EQ(source.asked(), numel);
    // Rank 0 holds the most (one more vocabulary row / MLP column where they do not divide);
    // the planner counts rank 0.
    if (rank == 0) {
      EXPECT_EQ(numel, planned);
    } else {
      EXPECT_LE(numel, planned);
    }
    // 1/8 of the decoder plus the replicated norms: at most 1/8 + 0.1%.
    EXPECT_LT(numel, full / 8 + full / 1000);
    EXPECT_GT(numel, full / 8 - full / 1000);
  }
}

// Checks that every parameter of `module` is a bf16 meta tensor; returns their element count.
int64_t CheckMetaBf16(const torch::nn::Module& module) {
  int64_t numel = 0;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    EXPECT_TRUE(item.value().is_meta()) << item.key();
    EXPECT_EQ(item.value().scalar_type(), at::kBFloat16) << item.key();
    numel += item.value().numel();
  }
  return numel;
}

void PrintVisionRank(const char* what, int64_t numel, int64_t full, int64_t asked) {
  std::printf("32B vision rank, %s: %lld parameters (%.3f GiB bf16) of %lld (%.2f%%); asked the "
              "source for %lld elements; the default tower allocated %.3f GiB fp32 before\n",
              what, static_cast<long long>(numel), numel * 2.0 / (1LL << 30),
              static_cast<long long>(full), 100.0 * numel / full,
              static_cast<long long>(asked), full * 4.0 / (1LL << 30));
}

TEST(ShardMetaTest, UlyssesVisionRankOf32BBuildsTheTowerFromTheSourceOnly) {
  const ModelPreset& preset = *FindModelPreset("qwen2_5_vl_32b");
  const std::vector<ParamShape> shapes = VisionParamShapes(preset.vision);
  MetaSource source(shapes, at::kBFloat16);
  // As CreateUlyssesVisionStage builds it.
  VisionTransformer tower(preset.vision, WholeTensors(source, "visual."));
  const int64_t numel = CheckMetaBf16(*tower);
  PrintVisionRank("Ulysses (whole tower)", numel, Numel(shapes), source.asked());
  EXPECT_EQ(numel, VisionParamsPerRank(preset.vision, 1));
  EXPECT_EQ(source.asked(), numel);
}

TEST(ShardMetaTest, VisionTpRankOf32BAtDegree8HoldsOnlyItsShard) {
  const ModelPreset& preset = *FindModelPreset("qwen2_5_vl_32b");
  const std::vector<ParamShape> shapes = VisionParamShapes(preset.vision);
  const int64_t full = Numel(shapes);
  for (int rank : {0, 7}) {
    MetaSource source(shapes, at::kBFloat16);
    comm::FailingCommunicator tp("vision.tp0", rank, 8);
    absl::StatusOr<std::unique_ptr<VisionTpTransformer>> model =
        VisionTpTransformer::Create(preset.vision, source, "visual.", tp);
    ASSERT_TRUE(model.ok()) << model.status();
    const int64_t numel = CheckMetaBf16(*(*model)->model());
    PrintVisionRank(rank == 0 ? "TP 8, rank 0" : "TP 8, rank 7", numel, full, source.asked());
    EXPECT_EQ(numel, VisionParamsPerRank(preset.vision, 8));
    EXPECT_EQ(source.asked(), numel);
    EXPECT_LT(numel, full / 8 + full / 50);  // 1/8 plus the replicated patch embed and norms
  }
}

TEST(ShardMetaTest, TheVisionTowerTheUlyssesRankReplicatesIsThePlannersCount) {
  const ModelPreset& preset = *FindModelPreset("qwen2_5_vl_32b");
  EXPECT_EQ(Numel(VisionParamShapes(preset.vision)), VisionParamsPerRank(preset.vision, 1));
}

}  // namespace
}  // namespace dhp
