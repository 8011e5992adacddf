// TextTpShardLayout against the layout of a real TextTpModel (CollectShardLayout of the built
// modules), for every supported degree of the tiny text config, tied and untied, with uneven
// vocabulary and MLP splits and replicated KV heads (T > Hkv).
#include "worker/parallel/text_tp_layout.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "common/model_presets.h"
#include "worker/comm/failing_communicator.h"
#include "worker/model/text_model.h"
#include "worker/parallel/text_tp_model.h"

namespace dhp::tp {
namespace {

std::string Describe(const ParamShard& s) {
  std::string out = "dim " + std::to_string(s.dim) + " of " + std::to_string(s.full_size) + ":";
  for (const ShardRange& r : s.ranges) {
    out += " [" + std::to_string(r.start) + "," + std::to_string(r.end()) + ")";
  }
  return out;
}

class TextTpLayoutTest : public testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(TextTpLayoutTest, EqualsTheBuiltModelsLayout) {
  const auto [tp, tied] = GetParam();
  TextConfig c = FindModelPreset("tiny")->text;  // 4 heads, 2 KV heads
  c.tie_word_embeddings = tied;
  c.vocab_size = 1021;        // uneven over 2 and 4 ranks
  c.intermediate_size = 126;  // uneven over 4 ranks
  TextForCausalLM ref(c);
  absl::StatusOr<std::map<std::string, ParamShard>> layout = TextTpShardLayout(c, tp);
  ASSERT_TRUE(layout.ok()) << layout.status();
  for (int r = 0; r < tp; ++r) {
    comm::FailingCommunicator comm("text.tp0", r, tp);  // building asks only rank and size
    absl::StatusOr<TextTpModel> m = CreateTextTpModel(c, ModuleTensorSource(*ref), comm);
    ASSERT_TRUE(m.ok()) << m.status();
    const ShardLayout& built = (*m)->shard_layout();
    ASSERT_EQ(built.size(), layout->size()) << "rank " << r;
    for (const auto& [name, shard] : built) {
      auto it = layout->find(name);
      ASSERT_NE(it, layout->end()) << name;
      EXPECT_EQ(Describe(it->second), Describe(shard)) << name;
    }
    // Every parameter the layout names exists, and the rest are the replicated norms.
    for (const auto& item : (*m)->named_parameters()) {
      if (layout->count(item.key()) == 0) {
        EXPECT_NE(item.key().find("norm"), std::string::npos) << item.key();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Degrees, TextTpLayoutTest,
                         testing::Combine(testing::Values(1, 2, 4), testing::Bool()));

TEST(TextTpLayoutTest, UnsupportedDegreeIsRefused) {
  absl::StatusOr<std::map<std::string, ParamShard>> layout =
      TextTpShardLayout(FindModelPreset("tiny")->text, 3);
  ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("num_heads 4"), std::string::npos) << layout.status();
}

}  // namespace
}  // namespace dhp::tp
