// The memory planner against numbers counted by hand: per-rank parameter counts of the official
// presets (full, TP shards, vision TP shards) tied to transformers' exact counts, ZeRO-1
// partitions, the activation formula on the tiny model, rank kinds of every placement, and the
// errors of specs the preset does not allow.
#include "common/memory_plan.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/model_presets.h"
#include "common/spec_test_util.h"

namespace dhp {
namespace {

v1::JobSpec Load(const std::string& path) { return LoadSpecFile(path); }

const ModelPreset& Preset(const std::string& name) {
  const ModelPreset* p = FindModelPreset(name);
  EXPECT_NE(p, nullptr) << name;
  return *p;
}

MemoryPlan Plan(const v1::JobSpec& spec, PlanDevice device = PlanDevice::kGpu) {
  absl::StatusOr<MemoryPlan> plan = PlanMemory(spec, Preset(spec.model().preset()), device);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : MemoryPlan();
}

// What transformers counts for the official configs (worker/model/param_count_test.cc has the
// same numbers from tools/hf_param_counts.py): vision, text.
struct Counted {
  const char* preset;
  int64_t vision, text;
};
constexpr Counted kTransformers[] = {
    {"qwen2_5_vl_3b", 668684288, 3085938688},
    {"qwen2_5_vl_7b", 676550144, 7615616512},
    {"qwen2_5_vl_32b", 688841984, 32763876352},
    {"qwen2_5_vl_72b", 704573696, 72706203648},
};

TEST(MemoryPlanTest, OneRankHoldsTheWholeModelAsTransformersCountsIt) {
  for (const Counted& c : kTransformers) {
    const ModelPreset& p = Preset(c.preset);
    EXPECT_EQ(VisionParamsPerRank(p.vision, 1), c.vision) << c.preset;
    EXPECT_EQ(TextParamsPerRank(p.text, 1), c.text) << c.preset;
  }
}

TEST(MemoryPlanTest, TextShardsSplitEverythingButTheNorms) {
  // 32B over TP 8 (rank 0), by hand: hidden 5120, head dim 128; per layer the norms 2 x 5120,
  // q_proj 640 x 5120 + 640, k/v_proj (one KV head) 2 x (128 x 5120 + 128), o_proj 5120 x 640,
  // MLP 3 x 5120 x 3456 = 60,959,616; embedding and LM head 19008 x 5120 each; final norm 5120.
  const int64_t layer =
      2 * 5120 + (640 * 5120 + 640) + 2 * (128 * 5120 + 128) + 5120 * 640 + 3 * 5120 * 3456;
  EXPECT_EQ(layer, 60959616);
  const int64_t shard = 64 * layer + 2 * 19008 * 5120 + 5120;
  EXPECT_EQ(shard, 4096062464);
  EXPECT_EQ(TextParamsPerRank(Preset("qwen2_5_vl_32b").text, 8), shard);
  // Eight shards hold the whole decoder once plus 7 extra copies of the replicated norms.
  const int64_t norms = 64 * 2 * 5120 + 5120;
  EXPECT_EQ(8 * shard - 7 * norms, 32763876352);
  // 7B over TP 4: 7 query heads (896 rows), 1 KV head, MLP 4736, vocabulary 38016.
  EXPECT_EQ(TextParamsPerRank(Preset("qwen2_5_vl_7b").text, 4), 1904057344);
  EXPECT_EQ(4 * int64_t{1904057344} - 3 * (28 * 2 * 3584 + 3584), 7615616512);
  // 3B over TP 4 replicates its 2 KV heads (each rank holds one of 128 rows); the embedding is
  // tied (no LM head).
  const int64_t layer3 =
      2 * 2048 + (512 * 2048 + 512) + 2 * (128 * 2048 + 128) + 2048 * 512 + 3 * 2048 * 2752;
  EXPECT_EQ(TextParamsPerRank(Preset("qwen2_5_vl_3b").text, 4), 36 * layer3 + 37984 * 2048 + 2048);
}

TEST(MemoryPlanTest, VisionTensorShardsReplicateEmbeddingNormsAndRowBiases) {
  // Replicated in the 7B tower: patch embed 1280 x 1176, per block norm1, norm2, attn.proj.bias
  // and mlp.down_proj.bias (4 x 1280), merger.ln_q 1280 and merger.mlp.2.bias 3584.
  // The degree must divide the MLP width (3420 = 4 x 855 in the 7B, 3456 = 128 x 27 in the 32B).
  const int64_t replicated = 1280 * 1176 + 32 * 4 * 1280 + 1280 + 3584;
  for (int t : {2, 4}) {
    EXPECT_EQ(t * VisionParamsPerRank(Preset("qwen2_5_vl_7b").vision, t) - (t - 1) * replicated,
              676550144)
        << t;
  }
  const int64_t replicated32 = replicated - 3584 + 5120;  // merger.mlp.2.bias is [5120]
  for (int t : {2, 4, 8, 16}) {
    EXPECT_EQ(t * VisionParamsPerRank(Preset("qwen2_5_vl_32b").vision, t) - (t - 1) * replicated32,
              688841984)
        << t;
  }
}

TEST(MemoryPlanTest, ThirtyTwoBillionConfigBytesPerRank) {
  const MemoryPlan plan = Plan(Load("configs/qwen2_5_vl_32b-sp8-tp8.yaml"));
  ASSERT_EQ(plan.kinds.size(), 1u);
  const RankKindMemory& k = plan.kinds[0];
  EXPECT_EQ(k.kind, "vision+text");
  EXPECT_EQ(k.world_ranks.size(), 8u);
  // bf16 text shard: parameters and gradients 2 B, master 4 B, moments 2 x 4 B per parameter.
  EXPECT_EQ(k.Bytes("text parameters"), 4096062464 * 2);
  EXPECT_EQ(k.Bytes("text gradients"), 4096062464 * 2);
  EXPECT_EQ(k.Bytes("text fp32 master"), 4096062464 * 4);
  EXPECT_EQ(k.Bytes("text Adam moments"), 4096062464 * 8);
  // The vision tower replicated (Ulysses), ZeRO-1 over the 8 vision ranks: 688841984 / 8.
  EXPECT_EQ(Zero1PartitionNumel(688841984, 8), 86105248);
  EXPECT_EQ(k.Bytes("vision parameters"), 688841984 * 2);
  EXPECT_EQ(k.Bytes("vision fp32 master"), 86105248 * 4);
  EXPECT_EQ(k.Bytes("vision Adam moments"), 86105248 * 8);
  EXPECT_EQ(k.Bytes("vision ZeRO-1 bookkeeping"), 86105248 * 16);
  // Logits [8192, 152064 / 8] in bf16 plus two fp32 copies.
  EXPECT_EQ(k.Bytes("text logits"), int64_t{8192} * 19008 * (2 + 8));
  // Collocated with equal degrees: the hand-off is in memory, [8192, 5120] bf16 twice.
  EXPECT_EQ(k.Bytes("hand-off buffers"), int64_t{8192} * 5120 * 2 * 2);
  EXPECT_EQ(plan.shapes.text_tokens, 8192);
  EXPECT_EQ(plan.shapes.patches, 32768);
  EXPECT_EQ(plan.shapes.patches_per_image, 5120);  // 1003520 / 14^2
  EXPECT_EQ(plan.shapes.vision_rank_patches, 4096);
}

TEST(MemoryPlanTest, GradientAccumulationHoldsBf16GradientsInFp32) {
  // The 32B config takes its 16 samples in one micro-batch: bf16 gradients (above). In 4
  // micro-batches of 4 they are summed in fp32 (worker/rank/stage.h): 4 B per parameter.
  v1::JobSpec spec = Load("configs/qwen2_5_vl_32b-sp8-tp8.yaml");
  ASSERT_EQ(spec.training().micro_batch_size(), 16);
  const RankKindMemory one = Plan(spec).kinds[0];
  spec.mutable_training()->set_micro_batch_size(4);
  const RankKindMemory four = Plan(spec).kinds[0];
  EXPECT_EQ(four.Bytes("text gradients"), 4096062464 * 4);      // 16.4 GB (8.2 GB in bf16)
  EXPECT_EQ(four.Bytes("vision gradients"), int64_t{688841984} * 4);  // 2.8 GB (1.4 GB)
  EXPECT_EQ(four.Bytes("text parameters"), one.Bytes("text parameters"));
  EXPECT_EQ(four.Bytes("vision parameters"), one.Bytes("vision parameters"));
  const int64_t extra = (4096062464 + int64_t{688841984}) * 2;  // 9.6 GB
  int64_t lines = 0;  // every line but the overhead
  for (const MemoryLine& l : one.lines) lines += l.item == "runtime overhead" ? 0 : l.bytes;
  EXPECT_EQ(four.total - one.total,
            extra + static_cast<int64_t>(static_cast<double>(lines + extra) * kRuntimeFraction) -
                static_cast<int64_t>(static_cast<double>(lines) * kRuntimeFraction));
  // training.grad_accum_dtype: bf16 sums them in bf16: the one-micro-batch figures again.
  spec.mutable_training()->set_grad_accum_dtype(v1::DTYPE_BF16);
  const RankKindMemory four_bf16 = Plan(spec).kinds[0];
  EXPECT_EQ(four_bf16.Bytes("text gradients"), one.Bytes("text gradients"));
  EXPECT_EQ(four_bf16.Bytes("vision gradients"), one.Bytes("vision gradients"));
  EXPECT_EQ(four_bf16.total, one.total);
  // fp32 stages hold fp32 gradients either way.
  spec = Load("configs/tiny-cpu.yaml");
  const int64_t fp32 = Plan(spec).kinds[0].Bytes("text gradients");
  spec.mutable_training()->set_micro_batch_size(1);  // 4 micro-batches of 1
  EXPECT_EQ(Plan(spec).kinds[0].Bytes("text gradients"), fp32);
}

TEST(MemoryPlanTest, SevenBillionConfigShardsOverBothReplicas) {
  const MemoryPlan plan = Plan(Load("configs/qwen2_5_vl_7b-sp4-tp4.yaml"));
  ASSERT_EQ(plan.kinds.size(), 1u);
  const RankKindMemory& k = plan.kinds[0];
  EXPECT_EQ(k.world_ranks.size(), 8u);
  // ZeRO-1 over the "vision" group: SP 4 x dp 2 = 8 ranks.
  EXPECT_EQ(k.Bytes("vision fp32 master"), int64_t{84568768} * 4);
  EXPECT_EQ(84568768 * 8, 676550144);
  EXPECT_EQ(k.Bytes("text parameters"), int64_t{1904057344} * 2);
  // The text stage is not partitioned over dp: each replica's rank holds its shard's state.
  EXPECT_EQ(k.Bytes("text Adam moments"), int64_t{1904057344} * 8);
}

TEST(MemoryPlanTest, TotalIsTheLinesPlusTheRuntimeOverhead) {
  for (const char* path : {"configs/qwen2_5_vl_32b-sp8-tp8.yaml",
                           "configs/qwen2_5_vl_7b-sp4-tp4.yaml", "configs/tiny-cpu.yaml"}) {
    for (PlanDevice device : {PlanDevice::kGpu, PlanDevice::kCpu}) {
      const MemoryPlan plan = Plan(Load(path), device);
      for (const RankKindMemory& k : plan.kinds) {
        int64_t sum = 0;
        for (const MemoryLine& l : k.lines) {
          if (l.item != "runtime overhead") sum += l.bytes;
        }
        const int64_t fixed =
            device == PlanDevice::kGpu ? kGpuRuntimeFixedBytes : kCpuRuntimeFixedBytes;
        EXPECT_EQ(k.Bytes("runtime overhead"),
                  fixed + static_cast<int64_t>(static_cast<double>(sum) * kRuntimeFraction))
            << path;
        EXPECT_EQ(k.total, sum + k.Bytes("runtime overhead")) << path;
        EXPECT_EQ(k.lines.back().item, "runtime overhead");
      }
      EXPECT_GT(plan.PeakBytes(), 0);
    }
  }
}

TEST(MemoryPlanTest, TinyTextActivationsByHand) {
  // tiny-cpu: fp32 (4 B), S = 1024, hidden 64, TP 2: 2 query heads x 16 = 32 columns, MLP 64.
  v1::JobSpec spec = Load("configs/tiny-cpu.yaml");
  const int64_t layer = 1024 * 64 * (8 + 4 * 4)  // two norms: fp32 inputs, outputs
                        + 1024 * 32 * 4 * 4      // q, k, v (GQA-expanded), attention output
                        + 1024 * 64 * 4 * 4;     // gate, silu, up, product
  const int64_t rest = 1024 * 64 * 2 * 4         // embeddings, image scatter
                       + 1024 * 16 * 8           // M-RoPE cos/sin fp32
                       + 1024 * 64 * 12;         // final norm
  EXPECT_EQ(Plan(spec).kinds[0].Bytes("text activations"), 2 * layer + rest);
  EXPECT_EQ(Plan(spec).kinds[0].Bytes("text logits"), 1024 * 512 * 12);
  // Checkpointing keeps each layer's input [1024, 64] and one layer's activations.
  spec.mutable_text()->set_activation_checkpointing(true);
  EXPECT_EQ(Plan(spec).kinds[0].Bytes("text activations"), 2 * 1024 * 64 * 4 + layer + rest);
  // On the CPU the causal softmax [2 heads, 1024, 1024] is saved too, and one layer's backward
  // holds two more of that size.
  const int64_t scores = int64_t{1024} * 1024 * 2 * 4;
  EXPECT_EQ(Plan(spec, PlanDevice::kCpu).kinds[0].Bytes("text activations"),
            2 * 1024 * 64 * 4 + layer + scores + rest + 2 * scores);
  spec.mutable_text()->set_activation_checkpointing(false);
  EXPECT_EQ(Plan(spec, PlanDevice::kCpu).kinds[0].Bytes("text activations"),
            2 * (layer + scores) + rest + 2 * scores);
}

TEST(MemoryPlanTest, CheckpointingAndFlashAttentionOnlyEverSave) {
  v1::JobSpec spec = Load("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  spec.mutable_vision()->set_activation_checkpointing(false);
  const MemoryPlan full = Plan(spec);
  spec.mutable_vision()->set_activation_checkpointing(true);
  spec.mutable_text()->set_activation_checkpointing(true);
  const MemoryPlan ckpt = Plan(spec);
  for (const char* item : {"vision activations", "text activations"}) {
    EXPECT_LT(ckpt.kinds[0].Bytes(item), full.kinds[0].Bytes(item)) << item;
    EXPECT_GT(Plan(spec, PlanDevice::kCpu).kinds[0].Bytes(item), ckpt.kinds[0].Bytes(item));
  }
}

TEST(MemoryPlanTest, RankKindsOfEachPlacement) {
  v1::JobSpec spec = Load("configs/tiny-cpu.yaml");
  spec.mutable_vision()->set_degree(4);  // vision 4 x text 2, collocated: ranks 2, 3 vision only
  MemoryPlan plan = Plan(spec);
  ASSERT_EQ(plan.kinds.size(), 2u);
  EXPECT_EQ(plan.kinds[0].kind, "vision+text");
  EXPECT_EQ(plan.kinds[0].world_ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.kinds[1].kind, "vision only");
  EXPECT_EQ(plan.kinds[1].world_ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(plan.kinds[1].Bytes("text parameters"), 0);
  // A vision-only rank receives the embeddings' gradient over the wire (fp32 [1024, 64]).
  EXPECT_EQ(plan.kinds[1].Bytes("hand-off buffers"), 1024 * 64 * (4 + 4));
  spec.set_placement(v1::PLACEMENT_SEPARATE);
  spec.set_data_parallel_size(2);
  plan = Plan(spec);
  ASSERT_EQ(plan.kinds.size(), 2u);
  EXPECT_EQ(plan.kinds[0].kind, "vision");
  EXPECT_EQ(plan.kinds[0].world_ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(plan.kinds[1].kind, "text");
  EXPECT_EQ(plan.kinds[1].world_ranks, (std::vector<int>{8, 9, 10, 11}));
  EXPECT_EQ(plan.kinds[1].Bytes("hand-off buffers"), 1024 * 64 * 8);
  // ZeRO-1 over all 8 vision ranks: ceil(324224 / 8) = 40528.
  EXPECT_EQ(plan.kinds[0].Bytes("vision fp32 master"), 40528 * 4);
}

TEST(MemoryPlanTest, VisionTensorParallelismShardsAndPartitionsOverReplicas) {
  v1::JobSpec spec = Load("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  spec.mutable_vision()->set_parallelism(v1::PARALLELISM_TENSOR);
  const MemoryPlan plan = Plan(spec);
  const int64_t shard = VisionParamsPerRank(Preset("qwen2_5_vl_7b").vision, 4);
  EXPECT_EQ(plan.kinds[0].Bytes("vision parameters"), shard * 2);
  // ZeRO-1 over "vision.dp<i>": the 2 replicas.
  EXPECT_EQ(plan.kinds[0].Bytes("vision fp32 master"), (shard + 1) / 2 * 4);
  EXPECT_EQ(plan.shapes.vision_rank_patches, plan.shapes.patches);  // the whole sequence
}

TEST(MemoryPlanTest, RefusesDegreesThePresetDoesNotAllow) {
  v1::JobSpec spec = Load("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  spec.mutable_text()->set_degree(3);
  absl::StatusOr<MemoryPlan> plan = PlanMemory(spec, Preset("qwen2_5_vl_7b"), PlanDevice::kGpu);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "text.degree: 3 does not fit the 28 attention heads and 4 KV heads of qwen2_5_vl_7b");
  spec = Load("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  spec.mutable_vision()->set_degree(3);
  plan = PlanMemory(spec, Preset("qwen2_5_vl_7b"), PlanDevice::kGpu);
  EXPECT_EQ(plan.status().message(),
            "vision.degree: 3 does not divide the 16 attention heads of the qwen2_5_vl_7b vision "
            "encoder");
  spec = Load("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  spec.set_data_parallel_size(0);
  EXPECT_EQ(PlanMemory(spec, Preset("qwen2_5_vl_7b"), PlanDevice::kGpu).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An absurd data.max_seq_len saturates instead of overflowing.
  spec = Load("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  spec.mutable_data()->set_max_seq_len(1 << 30);
  plan = PlanMemory(spec, Preset("qwen2_5_vl_7b"), PlanDevice::kCpu);
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->PeakBytes(), int64_t{1} << 50);
}

TEST(MemoryPlanTest, SummaryNamesEveryRankKindAndItsTotal) {
  const MemoryPlan plan = Plan(Load("configs/qwen2_5_vl_32b-sp8-tp8.yaml"));
  const std::string s = MemoryPlanSummary(plan);
  EXPECT_EQ(s.rfind("per-rank memory estimate of qwen2_5_vl_32b (vision sequence x8, text tensor "
                    "x8, dp 1, collocate, GPU): 8 vision+text ranks: vision parameters 1.28 GiB, ",
                    0),
            0u)
      << s;
  EXPECT_NE(s.find(", total " + GiBText(plan.PeakBytes()) + " GiB"), std::string::npos) << s;
  EXPECT_EQ(GiBText(int64_t{3} << 29), "1.50");
}

}  // namespace
}  // namespace dhp
