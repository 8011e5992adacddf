// The memory planner: an analytic per-rank memory model of a job's layout, in bytes. Plain
// arithmetic (no LibTorch), so that the controller's scheduler (a job's demand per rank slot and
// the refusal of jobs that can never fit), `dhpctl plan` and tests use the one formula.
//
// What a rank holds at the peak of a step (DistTrainer, worker/rank/dist_step.cc: vision forward,
// then text forward and backward, then vision backward, then the reductions and the optimizer):
//   vision  (every rank hosting a vision role)
//     parameters + gradients  sequence parallelism: the whole tower on every rank (replicated);
//                             vision tensor parallelism: this rank's shard (vision_tp.h: qkv,
//                             proj, gate/up/down, merger.mlp.0/2 split by Sv; patch embed, norms,
//                             row-parallel biases replicated)
//     fp32 master + moments   ZeRO-1 (zero1.h): the flat parameters are split into partitions of
//                             ceil(P / G) over G = Sv*dp ranks ("vision") with sequence
//                             parallelism, G = dp ("vision.dp<i>") on the shard with vision TP.
//                             Zero1AdamW keeps its fp32 master whatever the parameter dtype, and
//                             per partition element also the reduced fp32 gradient, an fp32 decay
//                             mask and an fp64 norm weight (the "ZeRO-1 bookkeeping" line).
//   text    (every rank hosting a text role; Megatron TP over Tt, tp_shard.h)
//     q/o heads Hq/Tt; k/v heads Hkv/Tt, or one head when Tt > Hkv (replicated); MLP width and
//     vocabulary (embedding, LM head) split evenly, the first ranks getting one more: rank 0's
//     share is counted (the largest); norms replicated. Master (bf16/fp16 only) and both Adam
//     moments are held per shard, not partitioned over dp.
//   dtypes  a stage's dtype (bf16/fp16: 2 bytes, fp32: 4) is its parameters', gradients' and
//     activations' dtype; master weights and moments are fp32. With gradient accumulation
//     (training.micro_batch_size below the replica's share: more than one micro-batch per step)
//     a bf16/fp16 stage's gradients are fp32 (summed over the micro-batches in fp32,
//     worker/rank/stage.h fp32_grad_accumulation): 4 bytes instead of 2; its transient bf16
//     gradient, one parameter's at a time, is not counted.
//   activations  per replica and step one packed sequence of S = data.max_seq_len tokens; image
//     tokens are at most S (M = S), so N = M * spatial_merge^2 patches, and one image has at most
//     data.max_pixels / patch^2 patches (the full-attention segment). Ulysses: a rank holds
//     ceil(N / Sv) patches for the sequence-local parts and [N, H/Sv] heads in attention; vision
//     TP: every rank all N patches with H/Sv heads and I/Sv MLP columns. Text: S tokens with
//     Hq/Tt heads and I/Tt columns. Counted per layer: norm inputs (an fp32 copy) and outputs,
//     qkv, rotated q/k, GQA-expanded k/v, attention output, the four MLP intermediates; attention
//     score matrices only where they are materialised (kCpu: LibTorch's math attention saves
//     the softmax [heads, L, L] per segment, and one block's backward holds two more of the
//     largest; kGpu: flash attention, none). With activation checkpointing:
//     each layer's input plus one layer's activations while it is recomputed. Logits: the
//     vocab-parallel cross entropy's [S, vocab/Tt] in the stage dtype plus two fp32 copies.
//   buffers  Ulysses all-to-all send/receive of one full-attention block; vision/text TP
//     all-reduce temporaries; the ZeRO-1 flat fp32 buffer (reduce-scatter input, then all-gather
//     output: one at a time); text DP buckets (64 MiB) and the replicated-KV gradient all-reduce;
//     the vision -> text hand-off of image embeddings [M, out_hidden] and their gradient (by
//     reference when vision rank i and text rank i share the process, fp32 receive buffers when
//     they come over the wire).
//   runtime overhead  a fixed part plus a fraction of everything else (kGpu: CUDA context, NCCL
//     and cuBLAS workspaces, caching-allocator fragmentation; kCpu: the process and LibTorch's
//     runtime, malloc fragmentation). kCpu also counts the asynchronous checkpoint snapshots in
//     host memory (checkpoint.async_write: up to 2 copies of the rank's state).
// The total is the sum of the lines: buffers that live at different moments of the step are all
// counted, so it is an upper bound by up to the smallest of them. Not modelled: the model's
// construction (shard-first: one tensor's slice at a time beside the rank's parameters; the
// vision-TP baseline still builds its whole tower once), the data loader.
// The dtypes follow the design (DESIGN.md: a rank builds its parameters in their training
// dtype); today's DistTrainer keeps fp32 parameters whatever the stage dtype (4 B instead of 2
// for the replicated vision tower) and runs the distributed step without autocast (fp32
// activations). ZeRO-1 is counted whatever vision.zero_stage says: DistTrainer always builds
// Zero1AdamW.
//
// Stateless and thread-safe.
#ifndef DHP_COMMON_MEMORY_PLAN_H_
#define DHP_COMMON_MEMORY_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/layout.h"
#include "common/model_presets.h"
#include "dhp/v1/job_spec.pb.h"

namespace dhp {

// Where the ranks run: decides the attention kernel and the runtime overhead.
enum class PlanDevice { kGpu, kCpu };

// The runtime overhead line: fixed + fraction x (every other line).
inline constexpr int64_t kGpuRuntimeFixedBytes = int64_t{1} << 30;  // 1 GiB
inline constexpr int64_t kCpuRuntimeFixedBytes = int64_t{1} << 28;  // 0.25 GiB
inline constexpr double kRuntimeFraction = 0.05;

struct MemoryLine {
  std::string item;  // "vision parameters"
  int64_t bytes = 0;
  std::string detail;  // how it was counted, with the numbers
};

// The ranks of one kind: the same roles, hence the same memory.
struct RankKindMemory {
  std::string kind;  // "vision+text", "vision only", "text only"
  bool vision = false;
  bool text = false;
  std::vector<int> world_ranks;   // ascending
  std::vector<MemoryLine> lines;  // the items, without the total
  int64_t total = 0;

  // The line named `item`, or 0.
  int64_t Bytes(const std::string& item) const;
};

// What the activations were sized for (per data-parallel replica and step).
struct PlanShapes {
  int64_t text_tokens = 0;          // S = data.max_seq_len
  int64_t image_tokens = 0;         // M <= S
  int64_t patches = 0;              // N = M * merge^2
  int64_t patches_per_image = 0;    // min(N, max_pixels / patch^2): a full-attention segment
  int64_t vision_rank_patches = 0;  // ceil(N / Sv) with Ulysses, N with vision TP
};

struct MemoryPlan {
  std::string model;  // the preset's name
  comm::Layout layout;
  PlanDevice device = PlanDevice::kGpu;
  PlanShapes shapes;
  std::vector<RankKindMemory> kinds;  // by lowest world rank

  // The largest rank total: what every rank slot of the job must hold.
  int64_t PeakBytes() const;
};

// Parameters per rank (rank 0 holds the most): the vision tower over a vision tensor-parallel
// group of `vision_tp` (1: the whole tower, as with sequence parallelism), and the text decoder
// over a text tensor-parallel group of `text_tp`. The degrees must be valid for the config.
int64_t VisionParamsPerRank(const VisionConfig& vision, int vision_tp);
int64_t TextParamsPerRank(const TextConfig& text, int text_tp);
// ZeRO-1's partition: ceil(params / group_size) (at least 1).
int64_t Zero1PartitionNumel(int64_t params, int group_size);

// The plan of a normalised spec (common/spec_validate.h) whose architecture is `preset` (the
// caller resolves it: ResolveSpecModel, or a model directory's config.json). InvalidArgument,
// naming the field, when the spec is not normalised or its degrees do not fit the preset.
absl::StatusOr<MemoryPlan> PlanMemory(const v1::JobSpec& spec, const ModelPreset& preset,
                                      PlanDevice device);

// "62.31": bytes in GiB with 2 decimals.
std::string GiBText(int64_t bytes);
// "vision sequence x8, text tensor x8, dp 1, collocate" (the layout's words of the spec).
std::string PlanLayoutText(const comm::Layout& layout);
// The plan in one line per rank kind, for error messages:
//   "8 vision+text ranks (GPU): vision parameters 1.28 GiB, ..., total 62.31 GiB"
std::string MemoryPlanSummary(const MemoryPlan& plan);

}  // namespace dhp

#endif  // DHP_COMMON_MEMORY_PLAN_H_
