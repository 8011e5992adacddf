#!/usr/bin/env bash
# Builds everything and runs every test, against both LibTorch builds dhp supports:
#   1. the CMake files are checked against BUILD.bazel (tools/bazel_to_cmake.py --check);
#   2. the test environment .venv is installed (tools/setup_venv.sh: pinned PyTorch 2.x with
#      CUDA, Hugging Face transformers, tokenizers, safetensors, Pillow, NumPy);
#   3. Bazel against Debian's LibTorch 1.13 (CPU): unit tests, in-process API tests and the
#      multi-process end-to-end tests; then the REST API against its OpenAPI document
#      (/openapi.json) with schemathesis (tests/openapi_conformance_test.py: no 5xx, every
#      response as documented); then dhp's image preprocessing against transformers'
#      (tests/hf_preprocess_parity.py), the chat template against the official one rendered by
#      transformers (tests/hf_chat_template_parity.py), the tokenizer against Hugging Face
#      tokenizers (tests/hf_tokenizer_parity.py: ids and decoded text of 10,000 strings, NFC
#      included) and the model against transformers' Qwen2.5-VL
#      (tests/hf_model_parity.py: logits, loss, gradients, an AdamW step, and the loss of a
#      dhp-train step from a model directory alone);
#   4. CMake against .venv's LibTorch 2.x: every target with the CUDA and NCCL code compiled and
#      linked (a configure error otherwise), checked in the binaries by
#      tools/check_cmake_build.sh, then every C++ test under CTest on the CPU, the tokenizer and
#      the model against Hugging Face again and the multi-process parity test
#      (tests/multiprocess_parity_test.py) with CMake's binaries (LibTorch 2.x), then the steps of
#      tools/gpu-check.sh with --device cpu (so that the GPU check script itself stays working).
#   tools/test.sh            all of it
#   tools/test.sh --bazel    1-3 (faster while iterating)
#   tools/test.sh --cmake    1, 2 and 4
set -euo pipefail
cd "$(dirname "$0")/.."
only=${1:-}
jobs=$(nproc)

echo "== CMake files generated from BUILD.bazel =="
python3 tools/bazel_to_cmake.py --check

echo "== Python test environment (.venv) =="
tools/setup_venv.sh

if [ "$only" != "--cmake" ]; then
  echo "== bazel test //... (LibTorch 1.13, Debian) =="
  bazel test --jobs="$jobs" //...
  echo "== the REST API vs its OpenAPI document: schemathesis against a live controller (.venv) =="
  .venv/bin/python tests/openapi_conformance_test.py bazel-bin/controller/dhp-controller \
    bazel-bin/worker/agent/dhp-worker bazel-bin/api/dhpctl/dhpctl configs
  echo "== image preprocessing vs Hugging Face's processor (.venv) =="
  .venv/bin/python tests/hf_preprocess_parity.py bazel-bin/worker/data/dhp-preprocess
  echo "== chat template vs the official Qwen2.5-VL template in transformers (.venv) =="
  .venv/bin/python tests/hf_chat_template_parity.py bazel-bin/worker/data/dhp-data-check \
    configs/tiny-tokenizer.json
  echo "== the tokenizer vs Hugging Face tokenizers, 10,000 strings (.venv) =="
  .venv/bin/python tests/hf_tokenizer_parity.py bazel-bin/worker/data/dhp-tokenize
  echo "== the model vs Hugging Face transformers, fp32 (LibTorch 1.13) =="
  .venv/bin/python tests/hf_model_parity.py --parity bazel-bin/worker/rank/dhp-hf-parity \
    --dhp-train bazel-bin/worker/rank/dhp-train --gen-shapes bazel-bin/worker/data/dhp-gen-shapes
fi
if [ "$only" = "--bazel" ]; then
  exit 0
fi

echo "== cmake + ctest (LibTorch 2.x with CUDA, from .venv) =="
# The CUDA toolkit (nvcc, headers) that TorchConfig.cmake asks for: /usr/local/cuda here.
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
if ! command -v nvcc >/dev/null; then
  echo "test.sh: nvcc not found; the CMake build needs the CUDA toolkit (/usr/local/cuda)" >&2
  exit 1
fi
build=${DHP_CMAKE_BUILD_DIR:-build/cmake}
mkdir -p "$build"
prefix=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DDHP_REQUIRE_GPU_BUILD=ON >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
grep -- "-- dhp build:" "$build/configure.log"
cmake --build "$build" -j "$jobs"
tools/check_cmake_build.sh "$build"
# --repeat until-pass:2: a test that fails is run once more, and its first failure stays in the
# log. Segfaults seen under LibTorch 2.11 in Gloo tests that run ranks as threads came from
# c10d's flight recorder (worker/comm/rank_threads.cc now turns it off); the retry stays as a
# guard while that fix has little mileage, and a second failure is real.
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$jobs" --repeat until-pass:2
echo "== the tokenizer vs Hugging Face tokenizers, 10,000 strings (CMake build) =="
.venv/bin/python tests/hf_tokenizer_parity.py "$build/worker/data/dhp-tokenize"
echo "== the model vs Hugging Face transformers, fp32 (LibTorch 2.x) =="
.venv/bin/python tests/hf_model_parity.py --parity "$build/worker/rank/dhp-hf-parity" \
  --dhp-train "$build/worker/rank/dhp-train" --gen-shapes "$build/worker/data/dhp-gen-shapes"
echo "== dhp-rank processes vs a single-rank run (CMake build, LibTorch 2.x) =="
python3 tests/multiprocess_parity_test.py "$build/controller/dhp-controller" \
  "$build/worker/agent/dhp-worker" "$build/api/dhpctl/dhpctl" configs \
  "$build/worker/rank/dhp-rank" "$build/worker/rank/dhp-train" "$build/worker/rank/dhp-ckpt" \
  "$build/worker/data/dhp-gen-shapes"

echo "== tools/gpu-check.sh --device cpu (the GPU check's steps, run on the CPU) =="
tools/gpu-check.sh --python .venv/bin/python --build-dir "$build" --device cpu
echo "== all tests passed =="
