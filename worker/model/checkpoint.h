// Activation checkpointing for one block: run it without keeping its intermediate activations
// and recompute them in backward.
//
// LibTorch's C++ API has no torch.utils.checkpoint; this is the reentrant variant as a custom
// autograd Function. Forward runs `fn(x)` under no-grad and keeps only `x`; backward reruns
// `fn` on a detached copy of `x` with grad enabled and backpropagates through it, which
// accumulates the block's parameter gradients and returns dL/dx.
//
// Requirements on `fn`: deterministic (dhp's blocks have no dropout, so no RNG state is replayed),
// and every tensor it captures other than `x` must not require grad (captured rotary tables and
// segment bounds are fine). Thread-safe as far as autograd is.
#ifndef DHP_WORKER_MODEL_CHECKPOINT_H_
#define DHP_WORKER_MODEL_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <functional>

namespace dhp {

using BlockFn = std::function<at::Tensor(const at::Tensor&)>;

// Returns fn(x). When grad mode is off this is a plain call.
at::Tensor CheckpointedCall(const BlockFn& fn, const at::Tensor& x);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_CHECKPOINT_H_
