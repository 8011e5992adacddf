// Attention over packed sequences (several independent segments in one [S, ...] tensor) and the
// rotary helpers both towers use.
//
// The attention core takes q/k/v already split into heads, so sequence-parallel code can
// all-to-all around it (seq <-> heads) and tensor-parallel code can call it with its local
// heads. Modules hold an AttentionFn that defaults to VarlenAttention and can be swapped.
// Stateless functions; thread-safe.
#ifndef DHP_WORKER_MODEL_ATTENTION_H_
#define DHP_WORKER_MODEL_ATTENTION_H_

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace dhp {

// Attention within each segment [cu_seqlens[i], cu_seqlens[i+1]) of a packed sequence; tokens
// never attend across segments. q: [S, Hq, D], k/v: [S, Hkv, D] with Hq % Hkv == 0 (KV head j
// serves query heads j*Hq/Hkv ... (j+1)*Hq/Hkv - 1) -> [S, Hq, D]. cu_seqlens is on the host:
// strictly increasing from 0 to S (an empty vector means one segment). Scale 1/sqrt(D).
// Segments of equal length are batched into one fused SDPA call; each segment's result does
// not depend on the values of any other segment (bit for bit).
at::Tensor VarlenAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::vector<int64_t>& cu_seqlens, bool causal);

// Signature of VarlenAttention; the seam for Ulysses sequence parallelism.
using AttentionFn =
    std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::vector<int64_t>& cu_seqlens, bool causal)>;

// [..., D] -> cat(-x[..., D/2:], x[..., :D/2]).
at::Tensor RotateHalf(const at::Tensor& x);

// x * cos + RotateHalf(x) * sin with x: [S, H, D], cos/sin: [S, D] (broadcast over heads).
// With `in_fp32`, computed in fp32 and cast back to x's dtype (the vision tower does this);
// otherwise cos/sin are cast to x's dtype (the text decoder).
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       bool in_fp32);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_ATTENTION_H_
