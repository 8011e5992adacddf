// Issue 13's "a rank of the 32B example config allocates only its shard", shown without
// allocating 32B: text rank 0 of the 32B config's TP 8 is built from a source that yields
// `meta` tensors (shapes and dtypes, no storage), through the same constructors dhp-rank uses.
// Its parameters, and every byte it asked the source for, equal the memory planner's count for
// that rank (common/memory_plan.h TextParamsPerRank), about 1/8 of the decoder.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/memory_plan.h"
#include "common/model_presets.h"
#include "worker/comm/failing_communicator.h"
#include "worker/model/param_shapes.h"
#include "worker/model/tensor_source.h"
#include "worker/parallel/text_tp_model.h"

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

TEST(ShardMetaTest, TheVisionTowerTheUlyssesRankReplicatesIsThePlannersCount) {
  const ModelPreset& preset = *FindModelPreset("qwen2_5_vl_32b");
  EXPECT_EQ(Numel(VisionParamShapes(preset.vision)), VisionParamsPerRank(preset.vision, 1));
}

}  // namespace
}  // namespace dhp
