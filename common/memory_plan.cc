#include "common/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_layout.h"

namespace dhp {
namespace {

// Saturating arithmetic: absurd configs give a huge number, never an overflow.
constexpr int64_t kLimit = int64_t{1} << 60;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr double kGiBytes = static_cast<double>(int64_t{1} << 30);

int64_t Mul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > kLimit) return kLimit;
  return r;
}
template <typename... T>
int64_t Mul(int64_t a, int64_t b, T... rest) {
  return Mul(Mul(a, b), rest...);
}
int64_t Add(std::initializer_list<int64_t> xs) {
  int64_t sum = 0;
  for (int64_t x : xs) sum = std::min(kLimit, sum + std::min(kLimit, std::max<int64_t>(0, x)));
  return sum;
}
int64_t CeilDiv(int64_t a, int64_t b) { return b <= 0 ? a : (a + b - 1) / b; }

int DtypeBytes(v1::DType d) { return d == v1::DTYPE_FP32 ? 4 : 2; }
const char* DtypeName(v1::DType d) {
  return d == v1::DTYPE_FP32 ? "fp32" : d == v1::DTYPE_FP16 ? "fp16" : "bf16";
}

// "688.8M" for a parameter count.
std::string Millions(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(n) / 1e6);
  return buf;
}

// The stage sizes the lines are made of.
struct Dims {
  // layout
  int sv = 1, tt = 1, dp = 1;
  bool vision_tp = false;
  // vision
  int64_t vh = 0, vi = 0, vheads = 0, vhead_dim = 0, depth = 0, full_blocks = 0, window = 0;
  int64_t patch_dim = 0, out = 0, merge2 = 0;
  int av = 2;  // vision dtype bytes
  bool vckpt = false;
  // text
  int64_t th = 0, ti_r = 0, tq_cols = 0, tq_heads = 0, thead_dim = 0, layers = 0, vocab_r = 0;
  int64_t kv_full = 0;  // Hkv * head_dim
  bool kv_replicated = false;
  int at = 2;  // text dtype bytes
  bool tckpt = false;
  // Gradient accumulation: micro-batches per replica and step, and the gradients' bytes per
  // element (fp32 when a reduced-precision stage accumulates more than one micro-batch).
  int64_t micro = 1;
  int gv = 2, gt = 2;
  PlanShapes s;
};

// Micro-batches per replica and step of a normalised spec (1 when micro_batch_size is unset).
int64_t MicroBatches(const v1::JobSpec& spec, int dp) {
  const v1::TrainingSpec& t = spec.training();
  const int64_t share = dp >= 1 ? t.batch_size() / dp : 0;
  return t.micro_batch_size() < 1 ? 1 : std::max<int64_t>(1, share / t.micro_batch_size());
}

// The gradient line's detail, e.g. "688.8M x 4 B (fp32: 4 micro-batches of bf16 gradients
// summed in fp32)".
std::string GradDetail(const std::string& params, int grad_bytes, int dtype_bytes,
                       const std::string& dtype, int64_t micro) {
  if (grad_bytes == dtype_bytes) return absl::StrCat(params, " x ", grad_bytes, " B (", dtype, ")");
  return absl::StrCat(params, " x 4 B (fp32: ", micro, " micro-batches of ", dtype,
                      " gradients summed in fp32)");
}

absl::Status CheckSpec(const v1::JobSpec& spec, const ModelPreset& p) {
  const VisionConfig& v = p.vision;
  const TextConfig& t = p.text;
  const auto bad = [&](const std::string& field, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
  };
  if (v.hidden_size < 1 || v.num_heads < 1 || v.hidden_size % v.num_heads != 0 || v.depth < 1 ||
      v.intermediate_size < 1 || v.patch_size < 1 || v.spatial_merge_size < 1 ||
      v.out_hidden_size < 1 || v.in_channels < 1 || v.temporal_patch_size < 1) {
    return bad("model", absl::StrCat(p.name,
                                     ": the vision config has non-positive sizes or "
                                     "heads that do not divide hidden_size"));
  }
  if (t.hidden_size < 1 || t.num_heads < 1 || t.num_kv_heads < 1 ||
      t.hidden_size % t.num_heads != 0 || t.num_heads % t.num_kv_heads != 0 || t.num_layers < 1 ||
      t.intermediate_size < 1 || t.vocab_size < 1) {
    return bad("model", absl::StrCat(p.name,
                                     ": the text config has non-positive sizes or "
                                     "heads that do not divide hidden_size"));
  }
  const comm::Layout layout = LayoutForSpec(spec);
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  const int sv = layout.vision_degree, tt = layout.text_degree;
  if (v.num_heads % sv != 0) {
    return bad("vision.degree",
               absl::StrCat(sv, " does not divide the ", v.num_heads, " attention heads of the ",
                            p.name, " vision encoder"));
  }
  if (layout.vision_parallelism == comm::VisionParallelism::kTensor &&
      (v.intermediate_size % sv != 0 ||
       (int64_t{v.hidden_size} * v.spatial_merge_size * v.spatial_merge_size) % sv != 0)) {
    return bad("vision.degree",
               absl::StrCat(sv, " does not divide the vision MLP width ", v.intermediate_size,
                            " and merger width of ", p.name, " (vision tensor parallelism)"));
  }
  if (t.num_heads % tt != 0 || (t.num_kv_heads % tt != 0 && tt % t.num_kv_heads != 0) ||
      tt > t.intermediate_size || tt > t.vocab_size) {
    return bad("text.degree",
               absl::StrCat(tt, " does not fit the ", t.num_heads, " attention heads and ",
                            t.num_kv_heads, " KV heads of ", p.name));
  }
  if (spec.data().max_seq_len() < 1) {
    return bad("data.max_seq_len", absl::StrCat(spec.data().max_seq_len(),
                                                " must be positive (is the spec normalised?)"));
  }
  if (spec.data().max_pixels() < 1) {
    return bad("data.max_pixels", absl::StrCat(spec.data().max_pixels(),
                                               " must be positive (is the spec normalised?)"));
  }
  return absl::OkStatus();
}

Dims MakeDims(const v1::JobSpec& spec, const ModelPreset& p, const comm::Layout& layout) {
  const VisionConfig& v = p.vision;
  const TextConfig& t = p.text;
  Dims d;
  d.sv = layout.vision_degree;
  d.tt = layout.text_degree;
  d.dp = layout.dp;
  d.vision_tp = layout.vision_parallelism == comm::VisionParallelism::kTensor;
  d.vh = v.hidden_size;
  d.vi = v.intermediate_size;
  d.vheads = v.num_heads;
  d.vhead_dim = v.hidden_size / v.num_heads;
  d.depth = v.depth;
  for (int b : v.fullatt_block_indexes) d.full_blocks += (b >= 0 && b < v.depth) ? 1 : 0;
  const int64_t window_side = std::max(1, v.window_size / v.patch_size);
  d.window = window_side * window_side;
  d.patch_dim = int64_t{v.in_channels} * v.temporal_patch_size * v.patch_size * v.patch_size;
  d.out = v.out_hidden_size;
  d.merge2 = int64_t{v.spatial_merge_size} * v.spatial_merge_size;
  d.av = DtypeBytes(spec.vision().dtype());
  d.vckpt = spec.vision().activation_checkpointing();

  d.th = t.hidden_size;
  d.thead_dim = t.hidden_size / t.num_heads;
  d.tq_heads = t.num_heads / d.tt;
  d.tq_cols = d.tq_heads * d.thead_dim;
  d.ti_r = CeilDiv(t.intermediate_size, d.tt);
  d.vocab_r = CeilDiv(t.vocab_size, d.tt);
  d.layers = t.num_layers;
  d.kv_full = int64_t{t.num_kv_heads} * d.thead_dim;
  d.kv_replicated = t.num_kv_heads % d.tt != 0;
  d.at = DtypeBytes(spec.text().dtype());
  d.tckpt = spec.text().activation_checkpointing();
  // A reduced-precision stage sums micro-batches in fp32 unless training.grad_accum_dtype says
  // bf16 (worker/rank/stage.h).
  d.micro = MicroBatches(spec, d.dp);
  const bool fp32_accum = spec.training().grad_accum_dtype() != v1::DTYPE_BF16;
  d.gv = d.micro > 1 && fp32_accum ? 4 : d.av;
  d.gt = d.micro > 1 && fp32_accum ? 4 : d.at;

  PlanShapes& s = d.s;
  s.text_tokens = spec.data().max_seq_len();
  s.image_tokens = s.text_tokens;  // a sequence may be all image tokens
  s.patches = Mul(s.image_tokens, d.merge2);
  const int64_t per_image = spec.data().max_pixels() / (int64_t{v.patch_size} * v.patch_size);
  s.patches_per_image = std::min(s.patches, std::max(d.merge2, per_image));
  s.vision_rank_patches = d.vision_tp ? s.patches : CeilDiv(s.patches, d.sv);
  return d;
}

struct Amount {
  int64_t bytes = 0;
  std::string detail;
};

// Saved for backward by one vision block on this rank, and by the whole tower.
Amount VisionActivations(const Dims& d, PlanDevice device) {
  const int64_t n = d.s.vision_rank_patches, N = d.s.patches, L = d.s.patches_per_image;
  const int64_t a = d.av, h = d.vh, i = d.vi;
  const bool cpu = device == PlanDevice::kCpu;
  int64_t base = 0, window_scores = 0, full_scores = 0, rest = 0;
  if (!d.vision_tp) {
    // Sequence-local [n, h]: norm1/norm2 fp32 inputs (4+4) and outputs (a+a), qkv [n, 3h],
    // rotated q, k [n, h] each, attention output [n, h]; MLP gate, silu, up, product [n, I].
    // Full-attention blocks hold q, k, v as [N, H/Sv, D]: as many elements.
    base = Add({Mul(n, h, 8 + 8 * a), Mul(n, i, 4 * a)});
    if (cpu) {  // softmax output [H, w, w] per window; [H/Sv, L, L] per image
      window_scores = Mul(n, std::min(n, d.window), d.vheads, a);
      full_scores = Mul(N, L, d.vheads / d.sv, a);
    }
    // Pixels [N, patch_dim] fp32 (every rank holds the batch), local rows [n, patch_dim] and
    // patch embedding [n, h]; rotary cos/sin [N, D] fp32; merger ln_q fp32 input, its output,
    // mlp.0 output, GELU output ([n/4, 4h] each).
    rest = Add({Mul(N, d.patch_dim, 4), Mul(n, d.patch_dim, a), Mul(n, h, a),
                Mul(N, d.vhead_dim, 8), Mul(n, h, 4 + 4 * a)});
  } else {
    // Every rank runs all N patches: norms on [N, h] replicated (4+a each), qkv [N, 3h/Sv],
    // q, k [N, h/Sv], attention output [N, h/Sv]; MLP intermediates [N, I/Sv] x 4.
    base = Add({Mul(N, h, 8 + 2 * a), Mul(N, h / d.sv, 6 * a), Mul(N, i / d.sv, 4 * a)});
    if (cpu) {
      window_scores = Mul(N, std::min(N, d.window), d.vheads / d.sv, a);
      full_scores = Mul(N, L, d.vheads / d.sv, a);
    }
    // Pixels fp32 and their cast, embedding [N, h], rotary; merger: ln_q on [N, h], mlp.0 and
    // GELU outputs [N/4, 4h/Sv].
    rest = Add({Mul(N, d.patch_dim, 4 + a), Mul(N, h, a), Mul(N, d.vhead_dim, 8), Mul(N, h, 4 + a),
                Mul(N / 4, 4 * h / d.sv, 2 * a)});
  }
  const int64_t window_block = base + window_scores;
  const int64_t full_block = base + full_scores;
  const int64_t window_blocks = d.depth - d.full_blocks;
  // The backward of one block briefly holds the gradients of its probabilities and of its scores
  // (two more score-sized tensors); the forward, scores next to their softmax (one more).
  rest = Add({rest, 2 * std::max(window_blocks > 0 ? window_scores : 0,
                                 d.full_blocks > 0 ? full_scores : 0)});
  const int64_t rows = d.vision_tp ? N : n;
  Amount out;
  if (d.vckpt) {
    const int64_t largest =
        std::max(window_blocks > 0 ? window_block : 0, d.full_blocks > 0 ? full_block : 0);
    out.bytes = Add({Mul(d.depth, rows, h, a), largest, rest});
    out.detail = absl::StrCat("checkpointed: ", d.depth, " block inputs [", rows, ", ", h,
                              "] + 1 block recomputed; ", rows, " patches");
  } else {
    out.bytes = Add({Mul(window_blocks, window_block), Mul(d.full_blocks, full_block), rest});
    out.detail = absl::StrCat(d.depth, " blocks x ", rows, " patches");
  }
  if (cpu) absl::StrAppend(&out.detail, "; attention scores materialised (CPU)");
  return out;
}

Amount TextActivations(const Dims& d, PlanDevice device) {
  const int64_t S = d.s.text_tokens, a = d.at, h = d.th;
  // Norm fp32 inputs and outputs (4+2a per norm, two norms), q and GQA-expanded k, v and the
  // attention output [S, Hq/Tt * D], MLP gate, silu, up, product [S, I/Tt].
  int64_t layer = Add({Mul(S, h, 8 + 4 * a), Mul(S, d.tq_cols, 4 * a), Mul(S, d.ti_r, 4 * a)});
  // CPU: the softmax output [Hq/Tt, S, S] is saved per layer; one layer's backward briefly holds
  // two more (the gradients of the probabilities and of the scores).
  const int64_t scores = device == PlanDevice::kCpu ? Mul(S, S, d.tq_heads, a) : 0;
  layer = Add({layer, scores});
  // Embedding lookup and the sequence with image embeddings scattered in [S, h]; M-RoPE cos/sin
  // [S, D] fp32; the final norm.
  const int64_t rest =
      Add({Mul(S, h, 2 * a), Mul(S, d.thead_dim, 8), Mul(S, h, 4 + 2 * a), 2 * scores});
  Amount out;
  if (d.tckpt) {
    out.bytes = Add({Mul(d.layers, S, h, a), layer, rest});
    out.detail = absl::StrCat("checkpointed: ", d.layers, " layer inputs [", S, ", ", h,
                              "] + 1 layer recomputed");
  } else {
    out.bytes = Add({Mul(d.layers, layer), rest});
    out.detail = absl::StrCat(d.layers, " layers x ", S, " tokens");
  }
  if (device == PlanDevice::kCpu) absl::StrAppend(&out.detail, "; attention scores materialised");
  return out;
}

}  // namespace

int64_t RankKindMemory::Bytes(const std::string& item) const {
  for (const MemoryLine& l : lines) {
    if (l.item == item) return l.bytes;
  }
  return 0;
}

int64_t MemoryPlan::PeakBytes() const {
  int64_t peak = 0;
  for (const RankKindMemory& k : kinds) peak = std::max(peak, k.total);
  return peak;
}

int64_t VisionParamsPerRank(const VisionConfig& v, int vision_tp) {
  const int64_t t = std::max(1, vision_tp);
  const int64_t h = v.hidden_size, i = v.intermediate_size, out = v.out_hidden_size;
  const int64_t merged = h * v.spatial_merge_size * v.spatial_merge_size;
  const int64_t patch =
      int64_t{v.in_channels} * v.temporal_patch_size * v.patch_size * v.patch_size;
  // Replicated (vision_tp.h): patch embed, norm1/norm2, the row-parallel biases (attn.proj,
  // mlp.down_proj, merger.mlp.2) and merger.ln_q.
  const int64_t replicated = h * patch + v.depth * (2 * h + h + h) + h + out;
  // Split by the degree: attn.qkv (weight, bias), attn.proj.weight, mlp.gate/up (weight, bias),
  // mlp.down_proj.weight, merger.mlp.0 (weight, bias), merger.mlp.2.weight.
  const int64_t per_block = CeilDiv(3 * h * h + 3 * h, t) + CeilDiv(h * h, t) +
                            2 * CeilDiv(h * i + i, t) + CeilDiv(i * h, t);
  const int64_t merger = CeilDiv(merged * merged + merged, t) + CeilDiv(out * merged, t);
  return replicated + v.depth * per_block + merger;
}

int64_t TextParamsPerRank(const TextConfig& c, int text_tp) {
  const int64_t t = std::max(1, text_tp);
  const int64_t h = c.hidden_size, d = c.hidden_size / std::max(1, c.num_heads);
  const int64_t q = c.num_heads / t * d;  // q rows, o columns
  const int64_t kv = (c.num_kv_heads % t == 0 ? c.num_kv_heads / t : 1) * d;
  const int64_t vocab = CeilDiv(c.vocab_size, t), mlp = CeilDiv(c.intermediate_size, t);
  const int64_t layer = 2 * h                // input_layernorm, post_attention_layernorm
                        + q * h + q          // q_proj
                        + 2 * (kv * h + kv)  // k_proj, v_proj
                        + h * q              // o_proj
                        + 3 * h * mlp;       // gate, up, down
  return vocab * h * (c.tie_word_embeddings ? 1 : 2) + c.num_layers * layer + h;
}

int64_t Zero1PartitionNumel(int64_t params, int group_size) {
  return std::max<int64_t>(1, CeilDiv(params, std::max(1, group_size)));
}

std::string GiBText(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / kGiBytes);
  return buf;
}

std::string PlanLayoutText(const comm::Layout& l) {
  const std::string vision =
      l.vision_degree == 1
          ? "vision x1"
          : absl::StrCat(
                "vision ",
                l.vision_parallelism == comm::VisionParallelism::kTensor ? "tensor" : "sequence",
                " x", l.vision_degree);
  const std::string text =
      l.text_degree == 1 ? "text x1" : absl::StrCat("text tensor x", l.text_degree);
  return absl::StrCat(vision, ", ", text, ", dp ", l.dp, ", ",
                      l.placement == comm::Placement::kCollocated ? "collocate" : "separate");
}

std::string MemoryPlanSummary(const MemoryPlan& plan) {
  std::vector<std::string> kinds;
  for (const RankKindMemory& k : plan.kinds) {
    std::vector<std::string> items;
    for (const MemoryLine& l : k.lines) {
      if (l.bytes > 0) items.push_back(absl::StrCat(l.item, " ", GiBText(l.bytes), " GiB"));
    }
    const size_t n = k.world_ranks.size();
    kinds.push_back(absl::StrCat(n, " ", k.kind, n == 1 ? " rank: " : " ranks: ",
                                 absl::StrJoin(items, ", "), ", total ", GiBText(k.total), " GiB"));
  }
  return absl::StrCat("per-rank memory estimate of ", plan.model, " (", PlanLayoutText(plan.layout),
                      ", ", plan.device == PlanDevice::kGpu ? "GPU" : "CPU",
                      "): ", absl::StrJoin(kinds, "; "));
}

absl::StatusOr<MemoryPlan> PlanMemory(const v1::JobSpec& spec, const ModelPreset& preset,
                                      PlanDevice device) {
  if (absl::Status s = CheckSpec(spec, preset); !s.ok()) return s;
  MemoryPlan plan;
  plan.model = preset.name;
  plan.layout = LayoutForSpec(spec);
  plan.device = device;
  const comm::Layout& layout = plan.layout;
  const Dims d = MakeDims(spec, preset, layout);
  plan.shapes = d.s;

  // Rank kinds by role, in order of their lowest world rank.
  std::map<std::pair<bool, bool>, size_t> index;
  for (int r = 0; r < layout.WorldSize(); ++r) {
    const std::pair<bool, bool> roles{comm::VisionCoord(layout, r).has_value(),
                                      comm::TextCoord(layout, r).has_value()};
    auto [it, added] = index.emplace(roles, plan.kinds.size());
    if (added) {
      RankKindMemory k;
      k.vision = roles.first;
      k.text = roles.second;
      const bool separate = layout.placement == comm::Placement::kSeparate;
      k.kind = k.vision && k.text ? "vision+text"
               : k.vision         ? (separate ? "vision" : "vision only")
                                  : (separate ? "text" : "text only");
      plan.kinds.push_back(std::move(k));
    }
    plan.kinds[it->second].world_ranks.push_back(r);
  }

  const std::string vdt = DtypeName(spec.vision().dtype()), tdt = DtypeName(spec.text().dtype());
  const int64_t pv = VisionParamsPerRank(preset.vision, d.vision_tp ? d.sv : 1);
  const int zero_group = d.vision_tp ? d.dp : d.sv * d.dp;
  const int64_t part = Zero1PartitionNumel(pv, zero_group);
  const int64_t pt = TextParamsPerRank(preset.text, d.tt);
  const int64_t M = d.s.image_tokens;
  for (RankKindMemory& k : plan.kinds) {
    std::vector<MemoryLine>& lines = k.lines;
    int64_t state = 0;  // parameters and optimizer state (the checkpoint snapshot's size)
    if (k.vision) {
      const std::string held = d.vision_tp ? absl::StrCat("shard of vision tensor x", d.sv)
                                           : std::string("whole tower on every vision rank");
      lines.push_back({"vision parameters", Mul(pv, d.av),
                       absl::StrCat(Millions(pv), " x ", d.av, " B (", vdt, "), ", held)});
      lines.push_back({"vision gradients", Mul(pv, d.gv),
                       GradDetail(Millions(pv), d.gv, d.av, vdt, d.micro)});
      const std::string zp =
          absl::StrCat("ZeRO-1 partition ceil(", pv, " / ", zero_group, ") = ", part);
      lines.push_back({"vision fp32 master", Mul(part, 4), zp + " x 4 B"});
      lines.push_back({"vision Adam moments", Mul(part, 8), zp + " x 2 x 4 B"});
      lines.push_back({"vision ZeRO-1 bookkeeping", Mul(part, 16),
                       "partition x (fp32 reduced grad + fp32 decay mask + fp64 norm weight)"});
      const Amount act = VisionActivations(d, device);
      lines.push_back({"vision activations", act.bytes, act.detail});
      state = Add({state, Mul(pv, d.av), Mul(part, 12)});
    }
    if (k.text) {
      const std::string shard =
          d.tt == 1 ? std::string("whole decoder") : absl::StrCat("shard of text tensor x", d.tt);
      lines.push_back({"text parameters", Mul(pt, d.at),
                       absl::StrCat(Millions(pt), " x ", d.at, " B (", tdt, "), ", shard)});
      lines.push_back({"text gradients", Mul(pt, d.gt),
                       GradDetail(Millions(pt), d.gt, d.at, tdt, d.micro)});
      const int64_t master = d.at == 4 ? 0 : Mul(pt, 4);
      lines.push_back({"text fp32 master", master,
                       d.at == 4 ? std::string("none: fp32 parameters are the master")
                                 : absl::StrCat(Millions(pt), " x 4 B")});
      lines.push_back({"text Adam moments", Mul(pt, 8), absl::StrCat(Millions(pt), " x 2 x 4 B")});
      const Amount act = TextActivations(d, device);
      lines.push_back({"text activations", act.bytes, act.detail});
      lines.push_back({"text logits", Mul(d.s.text_tokens, d.vocab_r, d.at + 8),
                       absl::StrCat("[", d.s.text_tokens, ", ", d.vocab_r, "] x (", d.at,
                                    " + 2 x 4 B fp32) for the vocab-parallel cross entropy")});
      state = Add({state, Mul(pt, d.at), master, Mul(pt, 8)});
    }

    // Communication buffers.
    int64_t comm = 0;
    std::vector<std::string> parts;
    if (k.vision) {
      const int64_t n = d.s.vision_rank_patches;
      if (!d.vision_tp && d.sv > 1) {
        comm = Add({comm, Mul(n, d.vh, 6 * d.av)});
        parts.push_back("Ulysses all-to-all");
      } else if (d.vision_tp && d.sv > 1) {
        comm = Add({comm, Mul(d.s.patches, d.vh, 2 * d.av)});
        parts.push_back("vision TP all-reduce");
      }
      comm = Add({comm, Mul(part, zero_group, 4)});
      parts.push_back("ZeRO-1 flat fp32 buffer");
    }
    if (k.text) {
      if (d.tt > 1) {
        comm = Add({comm, Mul(d.s.text_tokens, d.th, 2 * d.at)});
        parts.push_back("text TP all-reduce");
      }
      if (d.dp > 1) {
        comm = Add({comm, std::min<int64_t>(64 * kMiB, Mul(pt, d.gt))});
        parts.push_back("text DP bucket");
      }
      if (d.kv_replicated && d.tt > 1) {
        comm = Add({comm, Mul(2 * d.layers, d.kv_full * d.th + d.kv_full, d.at)});
        parts.push_back("replicated-KV gradient all-reduce");
      }
    }
    lines.push_back({"communication buffers", comm, absl::StrJoin(parts, ", ")});

    // Hand-off of image embeddings [M, out] and their gradient.
    if (k.vision && k.text) {
      lines.push_back({"hand-off buffers", Mul(M, d.out, 2 * d.av),
                       absl::StrCat("[", M, ", ", d.out, "] embeddings + gradient, in memory")});
    } else if (k.vision) {
      lines.push_back({"hand-off buffers", Mul(M, d.out, d.av + 4),
                       absl::StrCat("[", M, ", ", d.out, "] embeddings + fp32 gradient received")});
    } else {
      lines.push_back(
          {"hand-off buffers", Mul(M, d.out, 8),
           absl::StrCat("[", M, ", ", d.out, "] fp32 embeddings received + their gradient")});
    }
    if (device == PlanDevice::kCpu &&
        (!spec.checkpoint().has_async_write() || spec.checkpoint().async_write())) {
      lines.push_back({"checkpoint snapshots", Mul(state, 2),
                       "2 copies of parameters + optimizer state (checkpoint.async_write)"});
    }

    int64_t sum = 0;
    for (const MemoryLine& l : lines) sum = Add({sum, l.bytes});
    const int64_t fixed =
        device == PlanDevice::kGpu ? kGpuRuntimeFixedBytes : kCpuRuntimeFixedBytes;
    const int64_t overhead =
        Add({fixed, static_cast<int64_t>(static_cast<double>(sum) * kRuntimeFraction)});
    lines.push_back(
        {"runtime overhead", overhead,
         absl::StrCat(GiBText(fixed), " GiB + ", static_cast<int>(kRuntimeFraction * 100), "% (",
                      device == PlanDevice::kGpu
                          ? "CUDA context, NCCL/cuBLAS workspaces, fragmentation"
                          : "process, LibTorch runtime, malloc fragmentation",
                      ")")});
    k.total = Add({sum, overhead});
  }
  return plan;
}

}  // namespace dhp
