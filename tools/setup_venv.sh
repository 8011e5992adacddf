#!/usr/bin/env bash
# Creates the Python virtual environment of the tests at .venv (ignored by git and Bazel) with
# the packages pinned in tools/requirements.lock: PyTorch 2.x (a CUDA build: its LibTorch is
# what the CMake build compiles against) and Hugging Face transformers, tokenizers, safetensors,
# Pillow and NumPy (the reference the model and data path are tested against); grpcio-tools (the
# Python client's stubs) and schemathesis (the REST API's OpenAPI conformance test).
# Idempotent: does nothing when .venv already holds exactly this lock file's packages.
# Needs Debian's python3-venv (tools/setup.sh installs it). About 4.5 GB; measured on a fresh
# machine: see README.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
lock=tools/requirements.lock
stamp=$venv/.dhp-lock-sha256
want=$(sha256sum "$lock" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  echo "setup_venv: $venv matches $lock"
  exit 0
fi

start=$(date +%s)
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$lock"
"$venv/bin/python" - <<'PY'
import torch, transformers, tokenizers, safetensors, PIL, numpy, grpc_tools, schemathesis
assert torch.version.cuda, "the pinned torch wheel must be a CUDA build"
print(f"setup_venv: torch {torch.__version__} (CUDA {torch.version.cuda}), transformers "
      f"{transformers.__version__}, tokenizers {tokenizers.__version__}, safetensors "
      f"{safetensors.__version__}, pillow {PIL.__version__}, numpy {numpy.__version__}")
PY
echo "$want" > "$stamp"
echo "setup_venv: installed in $(( $(date +%s) - start )) s"
