#!/usr/bin/env bash
# Checks dhp's GPU path on a Linux machine with NVIDIA GPUs and PyTorch installed, and prints one
# table of what passed:
#   1. builds dhp's worker targets with CMake against that PyTorch's LibTorch, with the CUDA and
#      NCCL code required (tools/check_cmake_build.sh checks the binaries);
#   2. runs the single-rank model on cuda against its CPU fp32 run, in fp32 and in bf16 autocast
#      (worker/rank:device_parity_test; the bounds are stated in the test), and the Hugging Face
#      parity tests where they exist;
#   3. runs the multi-rank parity layouts over NCCL, as many as the visible GPUs hold
#      (worker/rank:dist_parity_test, rank r on cuda:r);
#   4. runs the model benchmark on the GPU (bench/results/model_cuda.md).
#
#   tools/gpu-check.sh [--python PYTHON] [--build-dir DIR] [--jobs N] [--device cpu]
# PYTHON (default python3) is the interpreter whose torch is used. The other libraries come from
# the system as for any dhp build (tools/setup.sh installs them on Debian/Ubuntu).
# On a machine without a GPU, steps 2-4 report "no GPU" and the exit status says whether step 1
# passed; --device cpu runs steps 2-4 on the CPU instead (Gloo), to check this script itself.
set -uo pipefail
cd "$(dirname "$0")/.."
python=python3
build=build/gpu-check
jobs=$(nproc)
device=cuda
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$build"
logs=$build/logs
mkdir -p "$logs"
rows=()
failed=0
row() { rows+=("| $1 | $2 | $3 |"); [ "$2" = "FAIL" ] && failed=1; return 0; }

# Step runner: step NAME LOG PATTERN COMMAND...; the log's lines matching PATTERN (an ERE)
# become the detail, else its last line.
step() {
  local name=$1 log=$logs/$2 pattern=$3; shift 3
  echo "== $name (log: $log)"
  if "$@" >"$log" 2>&1; then
    local detail
    detail=$(grep -E -- "$pattern" "$log" | cut -c1-200 | paste -sd';' -)
    [ -n "$detail" ] || detail=$(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-120)
    row "$name" ok "${detail//|/\\|}"
    return 0
  fi
  tail -n 30 "$log"
  row "$name" FAIL "see $log"
  return 1
}

echo "== environment"
if ! info=$("$python" - <<'PY' 2>&1
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.device_count()} GPU(s) visible"
      + "".join(f"; {i}: {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())))
print(torch.cuda.device_count())
print(torch.utils.cmake_prefix_path)
PY
); then
  echo "gpu-check: $python cannot import torch: $info" >&2
  exit 2
fi
summary=$(sed -n 1p <<<"$info"); gpus=$(sed -n 2p <<<"$info"); prefix=$(sed -n 3p <<<"$info")
echo "$summary"
row "PyTorch" ok "$summary"

# ---- 1. build ------------------------------------------------------------------------------
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
targets=(dhp-rank dhp-train model_bench worker_rank_device_parity_test
         worker_rank_dist_parity_test)
built=0
if step "configure (CUDA + NCCL required)" configure.log "-- dhp build:" \
     cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
     -DDHP_REQUIRE_GPU_BUILD=ON &&
   step "build worker targets" build.log "^$" cmake --build "$build" -j "$jobs" --target "${targets[@]}" &&
   step "CUDA/NCCL compiled and linked" check.log "check_cmake_build:" \
     tools/check_cmake_build.sh "$build"; then
  built=1
fi

# ---- 2-4. on the GPU -----------------------------------------------------------------------
gpu_step() {  # gpu_step NAME LOG COMMAND...
  if [ "$built" != 1 ]; then row "$1" skipped "the build failed"; return; fi
  if [ "$device" = cuda ] && [ "$gpus" -lt 1 ]; then
    row "$1" "no GPU" "nothing visible to torch.cuda"; return
  fi
  step "$@"
}
[ "$device" = cuda ] || gpus=0
test_bin() { echo "$build/worker/rank/$1"; }
gpu_step "model on $device vs CPU fp32 (fp32, bf16)" device_parity.log "rel err" \
  env DHP_TEST_DEVICE=$device "$(test_bin device_parity_test)"
# The Hugging Face parity suite compares in fp32 on the CPU (tools/test.sh runs it); the GPU's
# numerics are checked against the CPU model by device_parity_test above.
row "Hugging Face parity on $device" "cpu only" \
  "tests/hf_model_parity.py and worker/rank:hf_golden_test run on the CPU in tools/test.sh"
gpu_step "multi-rank parity ($device, $gpus GPU(s))" dist_parity.log "PASSED|SKIPPED \] [0-9]" \
  env DHP_TEST_DEVICE=$device "$(test_bin dist_parity_test)"
if [ "$built" = 1 ] && [ "$gpus" -ge 1 ] && [ -f "$logs/dist_parity.log" ]; then
  skipped=$(grep -c "SKIPPED \]" "$logs/dist_parity.log" || true)
  [ "$skipped" -gt 0 ] && row "layouts needing more GPUs" skipped "$skipped (see dist_parity.log)"
fi
bench_out=bench/results  # model_cuda.md there; a --device cpu self-check keeps it in the logs
[ "$device" = cuda ] || bench_out=$logs
gpu_step "model_bench on $device" model_bench.log "^\| (tiny|wide) \| 1 \|" \
  "$build/bench/model_bench" --device "$device" --rounds 5 --out-dir "$bench_out"

echo
echo "## gpu-check: $(date -u +%Y-%m-%dT%H:%MZ), $(hostname)"
echo
echo "| step | result | detail |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $failed
