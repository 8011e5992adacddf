#include "worker/model/attention.h"

#include <map>

#include "worker/model/torch_compat.h"

namespace dhp {

at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       bool in_fp32) {
  const at::ScalarType dtype = in_fp32 ? at::kFloat : x.scalar_type();
  at::Tensor xc = x.to(dtype);
  at::Tensor c = cos.to(dtype).unsqueeze(-2);  // [S, 1, D]
  at::Tensor s = sin.to(dtype).unsqueeze(-2);
  return (xc * c + RotateHalf(xc) * s).to(x.scalar_type());
}

at::Tensor VarlenAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::vector<int64_t>& cu_seqlens, bool causal) {
  TORCH_CHECK_VALUE(q.dim() == 3 && k.dim() == 3 && v.dim() == 3,
                    "VarlenAttention wants [S, H, D]");
  const int64_t s_len = q.size(0), hq = q.size(1), hkv = k.size(1), d = q.size(2);
  TORCH_CHECK_VALUE(k.size(0) == s_len && v.size(0) == s_len && v.size(1) == hkv && hq % hkv == 0,
                    "VarlenAttention: q ", q.sizes(), " k ", k.sizes(), " v ", v.sizes());
  at::Tensor kr = k, vr = v;
  if (hkv != hq) {  // GQA: repeat each KV head for its group of query heads.
    const int64_t rep = hq / hkv;
    kr = k.unsqueeze(2).expand({s_len, hkv, rep, d}).reshape({s_len, hq, d});
    vr = v.unsqueeze(2).expand({s_len, hkv, rep, d}).reshape({s_len, hq, d});
  }
  std::vector<int64_t> bounds = cu_seqlens;
  if (bounds.empty()) bounds = {0, s_len};
  TORCH_CHECK_VALUE(bounds.front() == 0 && bounds.back() == s_len,
                    "VarlenAttention: cu_seqlens must ", "run from 0 to S = ", s_len, ", got ",
                    bounds.front(), "..", bounds.back());

  // [L, H, D] rows -> [1, H, L, D] and back.
  if (bounds.size() == 2) {
    at::Tensor out = compat::ScaledDotProductAttention(
        q.transpose(0, 1).unsqueeze(0), kr.transpose(0, 1).unsqueeze(0),
        vr.transpose(0, 1).unsqueeze(0), causal);        // [1, H, S, D]
    return out.squeeze(0).transpose(0, 1).contiguous();  // [S, H, D]
  }

  // Group segments by length; each group is one batched SDPA call over [B, H, L, D].
  std::map<int64_t, std::vector<int64_t>> by_len;  // length -> segment starts, in order
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const int64_t len = bounds[i + 1] - bounds[i];
    TORCH_CHECK_VALUE(len > 0, "VarlenAttention: cu_seqlens must be strictly increasing");
    by_len[len].push_back(bounds[i]);
  }
  // gather[j] = source row of row j in group order; identity when segments are already grouped.
  std::vector<int64_t> gather;
  gather.reserve(s_len);
  for (const auto& [len, starts] : by_len) {
    for (int64_t st : starts) {
      for (int64_t r = st; r < st + len; ++r) gather.push_back(r);
    }
  }
  bool identity = true;
  for (int64_t j = 0; j < s_len && identity; ++j) identity = gather[j] == j;
  at::Tensor qg = q, kg = kr, vg = vr;
  at::Tensor gather_t;
  if (!identity) {
    gather_t = at::tensor(gather, at::TensorOptions().dtype(at::kLong)).to(q.device());
    qg = q.index_select(0, gather_t);
    kg = kr.index_select(0, gather_t);
    vg = vr.index_select(0, gather_t);
  }
  std::vector<at::Tensor> outs;
  int64_t row = 0;
  for (const auto& [len, starts] : by_len) {
    const int64_t b = static_cast<int64_t>(starts.size());
    auto batch = [&](const at::Tensor& x) {  // [b*len, H, D] -> [b, H, len, D]
      return x.narrow(0, row, b * len).reshape({b, len, hq, d}).transpose(1, 2);
    };
    at::Tensor o = compat::ScaledDotProductAttention(batch(qg), batch(kg), batch(vg), causal);
    outs.push_back(o.transpose(1, 2).reshape({b * len, hq, d}));  // [b*len, H, D]
    row += b * len;
  }
  at::Tensor out = at::cat(outs, 0);  // [S, H, D], group order
  if (identity) return out;
  at::Tensor scatter = at::empty_like(gather_t);
  scatter.index_put_({gather_t}, at::arange(s_len, gather_t.options()));
  return out.index_select(0, scatter);  // back to sequence order
}

}  // namespace dhp
