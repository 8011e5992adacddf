#include "worker/rank/hf_parity.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "dhp/v1/job_spec.pb.h"
#include "worker/model/hf_config.h"
#include "worker/model/qwen2_5_vl.h"
#include "worker/model/safetensors.h"
#include "worker/model/text_model.h"
#include "worker/model/torch_compat.h"
#include "worker/model/torch_status.h"
#include "worker/model/weights.h"
#include "worker/rank/model_init.h"
#include "worker/optim/optimizer.h"

namespace dhp {
namespace {

// reference.safetensors: tensors by name, and the optimiser's hyper-parameters as metadata.
class Reference {
 public:
  static absl::StatusOr<Reference> Open(const std::string& dir) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
        SafetensorsFile::Open(dir + "/reference.safetensors");
    if (!f.ok()) return f.status();
    Reference r;
    r.file_ = std::shared_ptr<SafetensorsFile>(std::move(*f));
    return r;
  }
  bool Has(const std::string& name) const { return file_->tensors().count(name) > 0; }
  absl::StatusOr<at::Tensor> Get(const std::string& name) const {
    auto it = file_->tensors().find(name);
    if (it == file_->tensors().end()) {
      return absl::NotFoundError(absl::StrCat(file_->path(), ": no tensor ", name));
    }
    return ReadTensor(*file_, it->second);
  }
  absl::StatusOr<double> Number(const std::string& key) const {
    auto it = file_->metadata().find(key);
    double v = 0;
    if (it == file_->metadata().end() || !absl::SimpleAtod(it->second, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_->path(), ": metadata ", key, " is missing or not a number"));
    }
    return v;
  }
  std::vector<std::string> NamesWithPrefix(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& [name, info] : file_->tensors()) {
      if (name.rfind(prefix, 0) == 0) out.push_back(name.substr(prefix.size()));
    }
    return out;
  }

 private:
  std::shared_ptr<SafetensorsFile> file_;
};

// Adds the tensor pair to `row`, element-wise under row.bound.
void Accumulate(const std::string& name, const at::Tensor& dhp, const at::Tensor& hf,
                ParityRow* row) {
  at::Tensor a = dhp.detach().to(at::kDouble).reshape({-1});
  at::Tensor b = hf.detach().to(at::kDouble).reshape({-1});
  at::Tensor diff = (a - b).abs();
  at::Tensor ratio = diff / (row->bound.atol + row->bound.rtol * b.abs());
  row->elements += a.numel();
  if (a.numel() == 0) return;
  row->max_abs_diff = std::max(row->max_abs_diff, diff.max().item<double>());
  row->max_abs_ref = std::max(row->max_abs_ref, b.abs().max().item<double>());
  const double worst = ratio.max().item<double>();
  if (worst > row->worst || row->worst_at.empty()) {
    row->worst = std::max(row->worst, worst);
    row->worst_at = name;
  }
}

absl::StatusOr<PackedBatch> ReadBatch(const Reference& ref) {
  PackedBatch b;
  DHP_ASSIGN_OR_RETURN(b.input_ids, ref.Get("input_ids"));
  DHP_ASSIGN_OR_RETURN(b.labels, ref.Get("labels"));
  DHP_ASSIGN_OR_RETURN(at::Tensor cu, ref.Get("cu_seqlens"));
  for (int64_t i = 0; i < cu.numel(); ++i) b.cu_seqlens.push_back(cu[i].item<int64_t>());
  DHP_ASSIGN_OR_RETURN(at::Tensor grids, ref.Get("image_grid_thw"));
  for (int64_t i = 0; i < grids.size(0); ++i) {
    b.image_grids.push_back(
        {grids[i][0].item<int64_t>(), grids[i][1].item<int64_t>(), grids[i][2].item<int64_t>()});
  }
  if (!b.image_grids.empty()) {
    DHP_ASSIGN_OR_RETURN(b.pixel_values, ref.Get("pixel_values"));
  }
  return b;
}

absl::StatusOr<Qwen2_5_VL> LoadModel(const std::string& dir) {
  DHP_ASSIGN_OR_RETURN(ModelPreset preset, LoadHfConfig(dir));
  v1::JobSpec spec;
  spec.mutable_model()->set_weights_path(dir);
  return CreateModelForSpec(spec, preset, /*data_root=*/"", at::Device(at::kCPU), nullptr);
}

absl::StatusOr<OptimizerConfig> ReadOptimizerConfig(const Reference& ref) {
  OptimizerConfig c;
  DHP_ASSIGN_OR_RETURN(c.learning_rate, ref.Number("lr"));
  DHP_ASSIGN_OR_RETURN(c.beta1, ref.Number("beta1"));
  DHP_ASSIGN_OR_RETURN(c.beta2, ref.Number("beta2"));
  DHP_ASSIGN_OR_RETURN(c.eps, ref.Number("eps"));
  DHP_ASSIGN_OR_RETURN(c.weight_decay, ref.Number("weight_decay"));
  DHP_ASSIGN_OR_RETURN(c.grad_clip_norm, ref.Number("grad_clip_norm"));
  return c;
}

// Every model parameter has `prefix`<name> in the reference, and every such entry a parameter.
absl::Status CheckNamesMatch(const Reference& ref, const std::string& prefix,
                             const TrainingOptimizer::NamedParams& params) {
  std::vector<std::string> ref_names = ref.NamesWithPrefix(prefix);
  std::vector<std::string> names;
  for (const auto& [n, p] : params) names.push_back(n);
  std::sort(names.begin(), names.end());
  if (names == ref_names) return absl::OkStatus();
  std::vector<std::string> only_model, only_ref;
  std::set_difference(names.begin(), names.end(), ref_names.begin(), ref_names.end(),
                      std::back_inserter(only_model));
  std::set_difference(ref_names.begin(), ref_names.end(), names.begin(), names.end(),
                      std::back_inserter(only_ref));
  return absl::InvalidArgumentError(absl::StrCat(
      "parameters and reference ", prefix, " entries differ: ", only_model.size(),
      " only in dhp (first: ", only_model.empty() ? "-" : only_model[0], "), ", only_ref.size(),
      " only in the reference (first: ", only_ref.empty() ? "-" : only_ref[0], ")"));
}

// Gradients, then (when the reference has them) the clipped AdamW step.
absl::Status CompareTraining(const Reference& ref, const TrainingOptimizer::NamedParams& params,
                             const ParityBounds& bounds, ParityReport* report) {
  const bool norms = !ref.Has("grad/" + params.front().first);
  const std::string prefix = norms ? "grad_norm/" : "grad/";
  DHP_RETURN_IF_ERROR(CheckNamesMatch(ref, prefix, params));
  ParityRow grads{absl::StrCat(norms ? "grad norms" : "grads", " (", params.size(), ")")};
  grads.bound = norms ? bounds.grad_norm : bounds.grad;
  for (const auto& [name, p] : params) {
    DHP_ASSIGN_OR_RETURN(at::Tensor want, ref.Get(prefix + name));
    Accumulate(name, norms ? p.grad().norm().reshape({1}) : p.grad(), want, &grads);
  }
  report->rows.push_back(grads);
  if (!ref.Has("grad_total_norm")) return absl::OkStatus();

  // The optimiser is compared on transformers' gradients, so that its own error shows: Adam's
  // first update is lr * g / (|g| + eps), which turns a 1e-9 difference on a 1e-9 gradient into
  // a visible step difference (measured on dhp's own gradients: up to 1.5e-4 at lr 1e-2).
  DHP_RETURN_IF_ERROR(CheckNamesMatch(ref, "step/", params));
  for (const auto& [name, p] : params) {
    DHP_ASSIGN_OR_RETURN(at::Tensor g, ref.Get("grad/" + name));
    p.mutable_grad().copy_(g);
  }
  DHP_ASSIGN_OR_RETURN(OptimizerConfig config, ReadOptimizerConfig(ref));
  TrainingOptimizer opt(params, config);
  ParityRow total{"clip norm (hf grads)"};
  total.bound = bounds.grad_norm;
  DHP_ASSIGN_OR_RETURN(at::Tensor want_total, ref.Get("grad_total_norm"));
  Accumulate("grad_total_norm", at::tensor({opt.ClipGradNorm()}, at::kDouble), want_total, &total);
  report->rows.push_back(total);
  opt.Step();
  ParityRow step{absl::StrCat("AdamW on hf grads (", params.size(), ")")};
  step.bound = bounds.step;
  for (const auto& [name, p] : params) {
    DHP_ASSIGN_OR_RETURN(at::Tensor want, ref.Get("step/" + name));
    Accumulate(name, p, want, &step);
  }
  report->rows.push_back(step);
  return absl::OkStatus();
}

}  // namespace

bool ParityReport::ok() const {
  return !rows.empty() &&
         std::all_of(rows.begin(), rows.end(), [](const ParityRow& r) { return r.ok(); });
}

std::string ParityReport::Table() const {
  std::string out =
      absl::StrFormat("%s: loss dhp %.9f, transformers %.9f\n", case_dir, loss_dhp, loss_hf);
  absl::StrAppendFormat(&out, "  %-26s %9s %10s %10s %9s  %-16s %-6s %s\n", "quantity", "elements",
                        "max |hf|", "max |diff|", "worst/bnd", "bound atol, rtol", "", "worst at");
  for (const ParityRow& r : rows) {
    absl::StrAppendFormat(&out, "  %-26s %9d %10.3e %10.3e %9.3f  %-16s %-6s %s\n", r.what,
                          r.elements, r.max_abs_ref, r.max_abs_diff, r.worst,
                          absl::StrFormat("%.0e, %.0e", r.bound.atol, r.bound.rtol),
                          r.ok() ? "ok" : "FAILED", r.worst_at);
  }
  return out;
}

absl::StatusOr<ParityReport> RunHfParity(const std::string& case_dir, const ParityBounds& bounds) {
  DHP_ASSIGN_OR_RETURN(Reference ref, Reference::Open(case_dir));
  DHP_ASSIGN_OR_RETURN(PackedBatch batch, ReadBatch(ref));
  DHP_ASSIGN_OR_RETURN(Qwen2_5_VL model, LoadModel(case_dir));
  ParityReport report;
  report.case_dir = case_dir;
  TrainingOptimizer::NamedParams params;
  for (const auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());

  at::Tensor logits, loss;
  DHP_RETURN_IF_ERROR(CatchTorch("dhp forward and backward", [&] {
    logits = model->Logits(batch);
    loss = CausalLmLoss(logits, batch.labels, batch.cu_seqlens);
    loss.backward();
  }));
  DHP_ASSIGN_OR_RETURN(at::Tensor want_logits, ref.Get("logits"));
  DHP_ASSIGN_OR_RETURN(at::Tensor want_loss, ref.Get("loss"));
  if (!logits.sizes().equals(want_logits.sizes())) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits: dhp ", logits.sizes().size(), "-D, reference shape differs"));
  }
  report.loss_dhp = loss.item<double>();
  report.loss_hf = want_loss.item<double>();
  ParityRow lrow{"logits"};
  lrow.bound = bounds.logits;
  Accumulate("logits", logits, want_logits, &lrow);
  ParityRow loss_row{"loss"};
  loss_row.bound = bounds.loss;
  Accumulate("loss", loss.reshape({1}), want_loss, &loss_row);
  report.rows = {lrow, loss_row};
  DHP_RETURN_IF_ERROR(CompareTraining(ref, params, bounds, &report));
  return report;
}

absl::StatusOr<HfStepTiming> TimeHfStep(const std::string& case_dir, int steps, bool bf16) {
  if (steps < 1) return absl::InvalidArgumentError(absl::StrCat("steps: ", steps, " < 1"));
  DHP_ASSIGN_OR_RETURN(Reference ref, Reference::Open(case_dir));
  DHP_ASSIGN_OR_RETURN(PackedBatch batch, ReadBatch(ref));
  DHP_ASSIGN_OR_RETURN(Qwen2_5_VL model, LoadModel(case_dir));
  TrainingOptimizer::NamedParams params;
  HfStepTiming out;
  for (const auto& item : model->named_parameters()) {
    params.emplace_back(item.key(), item.value());
    out.parameters += item.value().numel();
  }
  out.tokens = batch.input_ids.numel();
  TrainingOptimizer opt(params, OptimizerConfig{});
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  std::vector<std::array<double, 3>> times;
  DHP_RETURN_IF_ERROR(CatchTorch("timed step", [&] {
    for (int i = 0; i <= steps; ++i) {
      opt.ZeroGrad();
      const Clock::time_point t0 = Clock::now();
      at::Tensor loss;
      {
        std::optional<compat::AutocastGuard> autocast;
        if (bf16) autocast.emplace(at::kCPU, at::kBFloat16);
        loss = CausalLmLoss(model->Logits(batch), batch.labels, batch.cu_seqlens);
      }
      const Clock::time_point t1 = Clock::now();
      loss.backward();
      const Clock::time_point t2 = Clock::now();
      opt.ClipGradNorm();
      opt.Step();
      const Clock::time_point t3 = Clock::now();
      if (i > 0) times.push_back({ms(t0, t1), ms(t1, t2), ms(t2, t3)});  // 0: warm-up
    }
  }));
  std::sort(times.begin(), times.end(),
            [](const auto& a, const auto& b) { return a[0] + a[1] + a[2] < b[0] + b[1] + b[2]; });
  const std::array<double, 3>& median = times[times.size() / 2];
  out.forward_ms = median[0];
  out.backward_ms = median[1];
  out.optimizer_ms = median[2];
  out.total_ms = median[0] + median[1] + median[2];
  return out;
}

}  // namespace dhp
