// dhp's model against a reference computed by Hugging Face transformers (tests/hf_model_parity.py
// writes the case directories): config.json and model.safetensors as save_pretrained wrote them,
// and reference.safetensors with the inputs and what transformers computed from them.
//
// RunHfParity loads the directory the way a job spec naming it as model.weights_path does (dhp's
// own config.json parser, strict weight loading), runs forward and backward on the same packed
// batch in fp32, and compares element by element, as torch.testing.assert_close does:
// |dhp - hf| <= atol + rtol * |hf| for every element. It compares what the reference holds:
//   logits, loss;  grad/<name> (every gradient) or grad_norm/<name> (the golden file's norms);
//   grad_total_norm and step/<name>: one TrainingOptimizer step (AdamW after clipping, with the
//   hyper-parameters of the file's metadata) against torch.optim.AdamW's parameters.
// Every parameter of the model must have its reference entry, and every entry its parameter.
//
// Thread-safety: not thread-safe (LibTorch's default generator is not touched, but the model and
// the optimizer are built per call).
#ifndef DHP_WORKER_RANK_HF_PARITY_H_
#define DHP_WORKER_RANK_HF_PARITY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dhp {

struct ParityBound {
  double atol = 0;
  double rtol = 0;
};

// Bounds per quantity. The defaults are the ones the parity suite asserts (see hf_parity.cc).
struct ParityBounds {
  ParityBound logits{1e-6, 1e-5};
  ParityBound loss{1e-6, 1e-7};
  ParityBound grad{5e-7, 1e-5};
  ParityBound grad_norm{1e-7, 1e-5};
  ParityBound step{1e-7, 1e-6};
};

// One compared quantity: a tensor, or a group of tensors reported as one row.
struct ParityRow {
  std::string what;  // "logits", "loss", "grad (81 tensors)", ...
  int64_t elements = 0;
  double max_abs_diff = 0;  // max |dhp - hf|
  double max_abs_ref = 0;   // max |hf|: the scale the bound is applied at
  double worst = 0;         // max |dhp - hf| / (atol + rtol |hf|): <= 1 passes
  std::string worst_at;     // the tensor holding the worst element
  ParityBound bound;
  bool ok() const { return worst <= 1.0; }
};

struct ParityReport {
  std::string case_dir;
  double loss_dhp = 0;
  double loss_hf = 0;
  std::vector<ParityRow> rows;
  bool ok() const;
  // A table: quantity, elements, max |diff|, worst / bound, the bound, verdict.
  std::string Table() const;
};

// Errors: an unreadable directory, a config dhp refuses, weights that do not load strictly, a
// reference entry without a parameter or the reverse (INVALID_ARGUMENT / NOT_FOUND naming it).
absl::StatusOr<ParityReport> RunHfParity(const std::string& case_dir,
                                         const ParityBounds& bounds = {});

// Wall time of one training step on a case directory's model and batch (reference.safetensors
// needs only the inputs), the median of `steps` steps after one warm-up: forward with the loss,
// backward, and the optimiser (clipping and AdamW with OptimizerConfig's defaults), on the CPU
// with LibTorch's current thread count. bench/hf_step.py times transformers alike.
struct HfStepTiming {
  double forward_ms = 0;
  double backward_ms = 0;
  double optimizer_ms = 0;
  double total_ms = 0;
  int64_t tokens = 0;
  int64_t parameters = 0;
};
// With `bf16`, forward (and so backward) runs under bf16 autocast on the CPU, as dhp-train runs a
// stage whose dtype is bf16; weights, gradients and the optimizer stay fp32.
absl::StatusOr<HfStepTiming> TimeHfStep(const std::string& case_dir, int steps, bool bf16 = false);

}  // namespace dhp

#endif  // DHP_WORKER_RANK_HF_PARITY_H_
