// The LibTorch headers most of dhp's LibTorch code includes, precompiled once for every target
// that needs LibTorch (cmake/torch.cmake, DHP_TORCH_PCH): parsing them costs most of a
// translation unit's compile time (measured: 37 s -> 13 s for worker/model/text_layer.cc).
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
