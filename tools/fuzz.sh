#!/usr/bin/env bash
# Runs dhp's fuzz targets (fuzz/*_fuzzer.cc) under clang's libFuzzer with AddressSanitizer and
# UndefinedBehaviorSanitizer, for a bounded time, starting from the corpora in fuzz/corpus/.
#
#   tools/fuzz.sh [SECONDS_IN_ALL [TARGET...]]     (default: 60 s over all five targets)
#
# The sources of each target come from Bazel (bazel query deps of //fuzz:<target>), so the
# list cannot drift from the BUILD files; the generated protobuf code comes from bazel-bin (run
# after `bazel build //fuzz/...`). System libraries are not instrumented, only dhp's code.
# A crash fails the script and its input is copied to fuzz/corpus/<target>/crash-<sha1>, which
# turns it into a regression input of //fuzz:<target> once committed (fix it first). New inputs
# that found new coverage stay in build/fuzz/<target>/corpus for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(spec_reader_fuzzer spec_validate_fuzzer rest_request_fuzzer \
           safetensors_header_fuzzer tokenizer_json_fuzzer)
fi
per_target=$(( total / ${#targets[@]} ))
[ "$per_target" -ge 1 ] || per_target=1
cxx=${CXX_FUZZ:-clang++-14}
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (tools/setup.sh installs clang)"; exit 2; }

bazel build //fuzz/... >/dev/null 2>&1 || bazel build //fuzz/...
gen=bazel-bin/proto
libs=(-lprotobuf -lgrpc++ -lgrpc -lgpr -labsl_status -labsl_statusor -labsl_strings
      -labsl_str_format_internal -labsl_cord -labsl_synchronization -labsl_time -labsl_int128
      -labsl_throw_delegate -labsl_raw_logging_internal -labsl_base -lyaml-cpp -lyaml -lpcre2-8
      -licuuc
      -lssl -lcrypto -lgtest -pthread)
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I. -I"$gen" -Wno-deprecated-declarations)

# Whether an object must be compiled again: it is missing, has no dependency file (-MMD), or
# its source or any header it included is newer. (Checking the source alone once linked a
# fuzzer from objects built against an older api/service.h: a vtable slot off by one.)
stale() {
  local obj=$1
  [ -f "$obj" ] && [ -f "$obj.d" ] || return 0
  local deps
  deps=$(sed -e 's/^[^:]*://' -e 's/\\$//' "$obj.d")
  # shellcheck disable=SC2086
  [ -n "$(find $deps -newer "$obj" -print -quit 2>/dev/null)" ]
}

# Objects are shared by the targets (same flags), and compiled two at a time (or $FUZZ_JOBS).
objdir=build/fuzz/obj
mkdir -p "$objdir"
jobs=${FUZZ_JOBS:-$(nproc)}
pids=()
reap() {  # reap N: wait for the oldest compiles until fewer than N run; a failed one fails all
  while [ ${#pids[@]} -ge "$1" ]; do
    wait "${pids[0]}" || { echo "fuzz: a compile failed" >&2; exit 1; }
    pids=("${pids[@]:1}")
  done
}

for target in "${targets[@]}"; do
  work=build/fuzz/$target
  mkdir -p "$work/corpus"
  # The .cc files of the target and its dhp dependencies, generated protobuf code included.
  mapfile -t srcs < <(bazel query --output=label \
      "kind('source file|generated file', deps(//fuzz:$target))" 2>/dev/null \
    | grep -E '^//.*\.cc$' | grep -v 'fuzz_main\.cc$' \
    | sed -E 's|^//proto:(.*)$|'"$gen"'/\1|; s|^//([^:]*):(.*)$|\1/\2|; s|^//:||')
  objs=()
  for src in "${srcs[@]}"; do
    obj=$objdir/$(echo "$src" | tr '/' '_').o
    if stale "$obj"; then
      reap "$jobs"
      "$cxx" "${flags[@]}" -MMD -MF "$obj.d" -c "$src" -o "$obj" &
      pids+=($!)
    fi
    objs+=("$obj")
  done
  reap 1
  "$cxx" "${flags[@]}" "${objs[@]}" "${libs[@]}" -o "$work/$target"
  echo "== $target: ${per_target}s from fuzz/corpus/${target%_fuzzer} (${#srcs[@]} sources)"
  artifacts=$work/artifacts/
  rm -rf "$artifacts" && mkdir -p "$artifacts"
  if ! "$work/$target" -max_total_time="$per_target" -timeout=10 -rss_limit_mb=2048 \
       -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts" \
       "$work/corpus" "fuzz/corpus/${target%_fuzzer}" > "$work/log.txt" 2>&1; then
    tail -n 60 "$work/log.txt"
    for crash in "$artifacts"*; do
      [ -f "$crash" ] || continue
      keep="fuzz/corpus/${target%_fuzzer}/crash-$(sha1sum "$crash" | cut -c1-16)"
      cp "$crash" "$keep"
      echo "fuzz: $target crashed; input kept as $keep"
    done
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$work/log.txt" || true
done
echo "fuzz: no crash in ${#targets[@]} target(s)"
