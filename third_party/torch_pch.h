// The LibTorch headers most of dhp's LibTorch code includes, precompiled once for every target
// that needs LibTorch, by CMake (cmake/torch.cmake, DHP_TORCH_PCH) and by Bazel
// (third_party/torch_pch.bzl): parsing them costs most of a translation unit's compile time
// (measured: 37 s -> 13 s for worker/model/text_layer.cc with LibTorch 2.x, 22 s -> 10.5 s with
// Debian's 1.13).
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
