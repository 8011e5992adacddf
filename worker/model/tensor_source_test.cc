#include "worker/model/tensor_source.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

namespace dhp {
namespace {

TEST(NamedTensorSourceTest, SlicesAreCopiesOfTheNarrowedFullTensor) {
  at::Tensor w = at::arange(24, at::kFloat).view({4, 6});
  NamedTensorSource src({{"w", w}, {"absent", at::Tensor()}});
  EXPECT_EQ(src.Shape("w"), (std::vector<int64_t>{4, 6}));
  EXPECT_TRUE(src.Has("w"));
  EXPECT_FALSE(src.Has("absent"));  // undefined counts as absent
  EXPECT_FALSE(src.Has("other"));
  at::Tensor rows = src.Slice("w", 0, 1, 2);
  EXPECT_TRUE(at::equal(rows, w.narrow(0, 1, 2)));
  at::Tensor cols = src.Slice("w", 1, 3, 3);
  EXPECT_TRUE(cols.is_contiguous());
  EXPECT_TRUE(at::equal(cols, w.narrow(1, 3, 3)));
  cols.fill_(-1);  // a copy: the source is unchanged
  EXPECT_EQ(w[0][3].item<float>(), 3.0f);
  EXPECT_TRUE(at::equal(src.Whole("w"), w));
  // Row ranges 0..1 and 3..4 concatenated (a fused projection's q and v parts).
  at::Tensor parts = src.Rows("w", {{0, 1}, {3, 1}});
  EXPECT_TRUE(at::equal(parts, at::cat({w.narrow(0, 0, 1), w.narrow(0, 3, 1)}, 0)));
}

TEST(CastTensorSourceTest, FloatingSlicesComeInTheDtypeAndEqualCastingTheFullTensor) {
  at::Tensor w = at::randn({4, 6}, at::kFloat);
  at::Tensor ids = at::arange(5, at::kLong);
  NamedTensorSource base({{"w", w}, {"ids", ids}});
  CastTensorSource src(base, at::kBFloat16);
  EXPECT_EQ(src.Shape("w"), (std::vector<int64_t>{4, 6}));
  EXPECT_TRUE(src.Has("w"));
  EXPECT_FALSE(src.Has("other"));
  at::Tensor cols = src.Slice("w", 1, 2, 3);
  EXPECT_EQ(cols.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(cols, w.to(at::kBFloat16).narrow(1, 2, 3)));
  EXPECT_EQ(src.Whole("ids").scalar_type(), at::kLong);  // integers pass as they are
  EXPECT_TRUE(at::equal(src.Whole("ids"), ids));
  EXPECT_THROW(src.Slice("w", 0, 3, 2), c10::ValueError);  // the base's checks still apply
}

TEST(NamedTensorSourceTest, UnknownNamesAndOutOfRangeSlicesThrowNamingThem) {
  NamedTensorSource src({{"w", at::zeros({4, 6})}});
  try {
    src.Shape("nope");
    FAIL() << "no throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor named nope"), std::string::npos);
  }
  try {
    src.Slice("w", 1, 4, 3);
    FAIL() << "no throw";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("slice [4, 7) of dimension 1 is outside its extent 6"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(src.Slice("w", 2, 0, 1), c10::Error);
  EXPECT_THROW(src.Slice("w", 0, -1, 1), c10::Error);
}

TEST(ModuleTensorSourceTest, NamesAreTheModulesParameterNames) {
  torch::nn::Linear lin(3, 5);
  NamedTensorSource src = ModuleTensorSource(*lin);
  EXPECT_EQ(src.Shape("weight"), (std::vector<int64_t>{5, 3}));
  EXPECT_TRUE(at::equal(src.Slice("bias", 0, 2, 3), lin->bias.detach().narrow(0, 2, 3)));
  EXPECT_FALSE(src.Slice("weight", 0, 0, 5).requires_grad());
}

}  // namespace
}  // namespace dhp
