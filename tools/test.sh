#!/usr/bin/env bash
# Builds everything and runs every test: Bazel (primary: unit tests, the in-process API tests
# and the multi-process end-to-end tests), then the CMake build of the same targets with CTest.
#   tools/test.sh            both builds
#   tools/test.sh --bazel    Bazel only (faster while iterating)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
echo "== bazel test //... =="
bazel test --jobs="$jobs" //...

if [ "${1:-}" = "--bazel" ]; then
  exit 0
fi

echo "== cmake + ctest =="
build=${DHP_CMAKE_BUILD_DIR:-build/cmake}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$jobs"
# The Python end-to-end tests already ran under Bazel; CTest runs the C++ unit tests.
ctest --test-dir "$build" --output-on-failure -j "$jobs"
echo "== all tests passed =="
