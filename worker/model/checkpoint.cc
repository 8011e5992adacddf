#include "worker/model/checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace dhp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps the block function alive in the autograd graph (saved_data holds IValues only).
struct BlockFnHolder : torch::CustomClassHolder {
  explicit BlockFnHolder(BlockFn f) : fn(std::move(f)) {}
  BlockFn fn;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  // `anchor` is an empty tensor that requires grad, so the node is recorded even when x does not
  // require grad (e.g. frozen embeddings): the block's parameters still get their gradients.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& anchor,
                            c10::intrusive_ptr<BlockFnHolder> holder) {
    (void)anchor;
    ctx->save_for_backward({x});
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    return holder->fn(x);  // grad mode is off inside a custom Function's forward
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    auto holder =
        c10::static_intrusive_pointer_cast<BlockFnHolder>(ctx->saved_data["fn"].toCapsule());
    at::Tensor xd = x.detach().requires_grad_(x.requires_grad());
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      y = holder->fn(xd);
    }
    torch::autograd::backward({y}, {grad_out[0]});
    return {x.requires_grad() ? xd.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CheckpointedCall(const BlockFn& fn, const at::Tensor& x) {
  if (!at::GradMode::is_enabled()) return fn(x);
  at::Tensor anchor = at::empty({0}, x.options()).requires_grad_(true);
  return CheckpointFunction::apply(x, anchor, c10::make_intrusive<BlockFnHolder>(fn));
}

}  // namespace dhp
