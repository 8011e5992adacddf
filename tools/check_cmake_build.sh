#!/usr/bin/env bash
# Checks that a CMake build of dhp compiled what a GPU build must have, from the build itself
# rather than from what CMake was asked for:
#   tools/check_cmake_build.sh BUILD_DIR
# - dhp_build.txt (written at configure time): LibTorch 2.x with CUDA, NCCL, tests on;
# - dhp-rank --build-info (compiled into the binary): cuda=on, nccl=on, the 2.4+ autocast API;
# - dhp-rank's dynamic section and symbols: libtorch_cuda, libc10_cuda and libnccl are linked;
#   it calls ProcessGroupNCCL's constructor, reads the CUDA caching allocator and queries CUDA
#   device properties;
# - CTest registers every test that BUILD.bazel declares (tools/bazel_to_cmake.py --tests), or
#   every one that needs LibTorch where the build was configured with DHP_LIBTORCH_ONLY=ON.
# Prints one line per check; exits 1 if any fails.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/check_cmake_build.sh BUILD_DIR}
rank=$build/worker/rank/dhp-rank
fails=0
check() {  # check NAME COMMAND...: runs COMMAND, prints ok/FAIL NAME
  if "${@:2}" >/dev/null 2>&1; then echo "  ok    $1"; else echo "  FAIL  $1"; fails=$((fails + 1)); fi
}
has() { grep -qx -- "$1" "$2"; }

echo "== what the CMake build compiled ($build) =="
sed 's/^/  /' "$build/dhp_build.txt"
check "LibTorch 2.x" grep -qE '^torch_version=2\.' "$build/dhp_build.txt"
check "configured with CUDA" has "torch_cuda=ON" "$build/dhp_build.txt"
check "configured with NCCL" has "nccl=ON" "$build/dhp_build.txt"
check "configured with tests" has "tests_built=ON" "$build/dhp_build.txt"

info=$(mktemp); trap 'rm -f "$info"' EXIT
"$rank" --build-info >"$info" 2>&1
sed 's/^/  dhp-rank --build-info: /' "$info"
check "dhp-rank: DHP_WITH_CUDA compiled" has "cuda=on" "$info"
check "dhp-rank: USE_C10D_NCCL compiled" has "nccl=on" "$info"
check "dhp-rank: bf16 CUDA autocast (2.4+ API)" has "cuda_autocast_api=per-device (2.4+)" "$info"
needed=$(readelf -d "$rank" | grep NEEDED)
for lib in libtorch_cuda.so libc10_cuda.so; do
  check "dhp-rank links $lib" grep -q "\[$lib\]" <<<"$needed"
done
check "dhp-rank loads libnccl.so.2" bash -c "ldd '$rank' | grep -q 'libnccl.so.2 => /'"
symbols=$(nm -C "$rank")
check "dhp-rank calls ProcessGroupNCCL::ProcessGroupNCCL" \
  grep -q " U c10d::ProcessGroupNCCL::ProcessGroupNCCL(" <<<"$symbols"
check "dhp-rank reads the CUDA caching allocator" \
  grep -q "c10::cuda::CUDACachingAllocator::allocator" <<<"$symbols"
check "dhp-rank queries CUDA device properties" \
  grep -q " U at::cuda::getDeviceProperties" <<<"$symbols"
# A vtable of Gloo's store compiled here from Debian's older Gloo headers would interpose on
# libtorch_cpu's own (2.x's has more virtual functions).
check "dhp-rank defines no Gloo store vtable" \
  bash -c "! nm -C --defined-only '$rank' | grep -q 'vtable for c10d::ProcessGroupGloo::GlooStore'"

scope=() scope_words="tests of BUILD.bazel"
if has "libtorch_only=ON" "$build/dhp_build.txt"; then
  scope=(--libtorch-only) scope_words="LibTorch tests of BUILD.bazel (DHP_LIBTORCH_ONLY)"
fi
want=$(python3 tools/bazel_to_cmake.py --tests "${scope[@]}")
have=$(ctest --test-dir "$build" -N | sed -n 's/^ *Test *#[0-9]*: //p' | sort)
missing=$(comm -23 <(echo "$want") <(echo "$have"))
extra=$(comm -13 <(echo "$want") <(echo "$have"))
check "CTest has all $(echo "$want" | wc -l) $scope_words" test -z "$missing"
[ -z "$missing" ] || echo "$missing" | sed 's/^/  not registered: /'
check "CTest has no test beyond them" test -z "$extra"
[ -z "$extra" ] || echo "$extra" | sed 's/^/  registered beyond: /'

if [ "$fails" -gt 0 ]; then
  echo "check_cmake_build: $fails check(s) failed"
  exit 1
fi
echo "check_cmake_build: all checks passed"
