#include "worker/parallel/tp_shard.h"

#include <gtest/gtest.h>

#include "common/model_presets.h"

namespace dhp::tp {
namespace {

const TextConfig& Text(const char* preset) { return FindModelPreset(preset)->text; }

TEST(EvenShardsTest, BalancedAndInOrder) {
  EXPECT_EQ(EvenShards(8, 4), (std::vector<ShardRange>{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  EXPECT_EQ(EvenShards(10, 4), (std::vector<ShardRange>{{0, 3}, {3, 3}, {6, 2}, {8, 2}}));
  EXPECT_EQ(EvenShards(5, 1), (std::vector<ShardRange>{{0, 5}}));
}

TEST(ParamShardTest, HoldersOfRepeatedRanges) {
  ParamShard s{0, 32, {{0, 16}, {0, 16}, {16, 16}, {16, 16}}};
  EXPECT_EQ(s.Holders(0), 2);
  EXPECT_EQ(s.Holders(3), 2);
  EXPECT_TRUE(s.HasReplicas());
  EXPECT_TRUE(s.IsFirstHolder(0));
  EXPECT_FALSE(s.IsFirstHolder(1));
  EXPECT_TRUE(s.IsFirstHolder(2));
  ParamShard split{1, 8, EvenShards(8, 2)};
  EXPECT_FALSE(split.HasReplicas());
  EXPECT_EQ(split.Holders(1), 1);
}

TEST(TextTpPlanTest, TinySplitsKvHeadsAtTwo) {
  auto plan = MakeTextTpPlan(Text("tiny"), 2, 1);  // 4 heads, 2 KV heads, head_dim 16
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->head_dim, 16);
  EXPECT_EQ(plan->q_heads[1], (ShardRange{2, 2}));
  EXPECT_EQ(plan->kv_heads[1], (ShardRange{1, 1}));
  EXPECT_EQ(plan->kv_replicas, 1);
  EXPECT_EQ(plan->QRows()[1], (ShardRange{32, 32}));
  EXPECT_EQ(plan->KvRows()[1], (ShardRange{16, 16}));
  EXPECT_EQ(plan->intermediate[1], (ShardRange{64, 64}));
  EXPECT_EQ(plan->my_vocab(), (ShardRange{512, 512}));
}

TEST(TextTpPlanTest, TinyReplicatesKvHeadsAtFour) {
  // Query head q uses KV head q / (Hq / Hkv) = q / 2: ranks 0, 1 -> KV 0; ranks 2, 3 -> KV 1.
  const TextConfig& c = Text("tiny");
  for (int r = 0; r < 4; ++r) {
    auto plan = MakeTextTpPlan(c, 4, r);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->kv_replicas, 2);
    EXPECT_EQ(plan->q_heads[r], (ShardRange{r, 1}));
    EXPECT_EQ(plan->kv_heads[r], (ShardRange{r / 2, 1}));
    const int64_t group = c.num_heads / c.num_kv_heads;
    EXPECT_EQ(plan->q_heads[r].start / group, plan->kv_heads[r].start) << "rank " << r;
  }
}

TEST(TextTpPlanTest, EveryLocalQueryHeadFindsItsKvHeadOnOfficialModels) {
  for (const char* name : {"qwen2_5_vl_3b", "qwen2_5_vl_7b", "qwen2_5_vl_32b", "qwen2_5_vl_72b"}) {
    const TextConfig& c = Text(name);
    const int group = c.num_heads / c.num_kv_heads;
    for (int t : ValidTextTpDegrees(c)) {
      for (int r = 0; r < t; ++r) {
        auto plan = MakeTextTpPlan(c, t, r);
        ASSERT_TRUE(plan.ok()) << plan.status();
        const ShardRange q = plan->q_heads[r], kv = plan->kv_heads[r];
        const int64_t local_group = q.length / kv.length;  // VarlenAttention's repeat factor
        for (int64_t i = 0; i < q.length; ++i) {
          EXPECT_EQ((q.start + i) / group, kv.start + i / local_group)
              << name << " T=" << t << " rank " << r << " local head " << i;
        }
      }
    }
  }
}

TEST(TextTpPlanTest, RefusesDegreesThatSplitHeadsUnevenly) {
  absl::Status s = ValidateTextTp(Text("tiny"), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_heads 4"), std::string::npos) << s;
  EXPECT_NE(s.message().find("1, 2, 4"), std::string::npos) << s;
  // 7B: 28 query heads do not split over 8 ranks.
  EXPECT_FALSE(ValidateTextTp(Text("qwen2_5_vl_7b"), 8).ok());
  EXPECT_TRUE(ValidateTextTp(Text("qwen2_5_vl_7b"), 4).ok());
  // 3B: 2 KV heads, TP 4 -> replicated.
  auto plan = MakeTextTpPlan(Text("qwen2_5_vl_3b"), 4, 3);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->kv_replicas, 2);
  EXPECT_EQ(ValidTextTpDegrees(Text("qwen2_5_vl_32b")), (std::vector<int>{1, 2, 4, 8, 40}));
  EXPECT_FALSE(MakeTextTpPlan(Text("tiny"), 2, 2).ok());
  EXPECT_FALSE(ValidateTextTp(Text("tiny"), 0).ok());
}

}  // namespace
}  // namespace dhp::tp
