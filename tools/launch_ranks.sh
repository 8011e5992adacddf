#!/usr/bin/env bash
# Starts every rank of a SUBMITTED job on this machine (loopback) against a running controller,
# the way dhp-worker starts them (one dhp-rank per world rank, with the agent's flags), for trying
# layouts by hand or in tests where no agent runs the job. Logs go under a temp dir; the exit
# status is non-zero if any rank failed (its exit code and log tail are printed). Kills the
# ranks it started on exit or Ctrl-C.
#
#   tools/launch_ranks.sh --controller 127.0.0.1:7070 --job J [--attempt 1] [--data-root DIR]
#                         [--world-size W] [--token-file F] [-- extra dhp-rank flags]
# The job's spec decides everything else (layout, steps, data, checkpoints). The world size is
# read from it (dhpctl get -o json; collocated max(Sv,Tt)*dp, separate (Sv+Tt)*dp) unless given.
# Relative dataset paths of the spec are taken relative to --data-root (default: the current
# directory). Do not use it on a job that agents run: they start its ranks themselves.
# Binaries: $DHP_RANK_BIN (default bazel-bin/worker/rank/dhp-rank), $DHPCTL_BIN (default
# bazel-bin/api/dhpctl/dhpctl).
set -euo pipefail
start_dir="$PWD"
cd "$(dirname "$0")/.."

controller="${DHP_SERVER:-127.0.0.1:7070}" job="" attempt=1 world="" data_root="$start_dir"
token_file="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --controller) controller="$2"; shift 2 ;;
    --job) job="$2"; shift 2 ;;
    --attempt) attempt="$2"; shift 2 ;;
    --world-size) world="$2"; shift 2 ;;
    --data-root) data_root="$2"; shift 2 ;;
    --token-file) token_file="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "launch_ranks.sh: unknown flag $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
[ -n "$job" ] || { echo "launch_ranks.sh: --job is required" >&2; exit 2; }
case "$data_root" in /*) ;; *) data_root="$start_dir/$data_root" ;; esac

bin="${DHP_RANK_BIN:-bazel-bin/worker/rank/dhp-rank}"
[ -x "$bin" ] || bazel build //worker/rank:dhp-rank
if [ -z "$world" ]; then
  dhpctl="${DHPCTL_BIN:-bazel-bin/api/dhpctl/dhpctl}"
  [ -x "$dhpctl" ] || bazel build //api/dhpctl:dhpctl
  auth=()
  [ -n "$token_file" ] && auth=(--token-file "$token_file")
  world=$("$dhpctl" --server "$controller" "${auth[@]}" -o json get "$job" | python3 -c '
import json, sys
spec = json.load(sys.stdin)["job"]["spec"]
sv = spec.get("vision", {}).get("degree", 1)
tt = spec.get("text", {}).get("degree", 1)
dp = spec.get("data_parallel_size", 1)
separate = spec.get("placement") == "PLACEMENT_SEPARATE"
print((sv + tt) * dp if separate else max(sv, tt) * dp)')
fi
flags=(--controller "$controller" --job "$job" --attempt "$attempt" --world-size "$world"
       --device cpu --data-root "$data_root")
[ -n "$token_file" ] && flags+=(--token-file "$token_file")

logs=$(mktemp -d /tmp/dhp-ranks.XXXXXX)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
echo "launching $world ranks of job $job attempt $attempt, logs in $logs"
for r in $(seq 0 $((world - 1))); do
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1 \
    "$bin" "${flags[@]}" --world-rank "$r" "${extra[@]}" >"$logs/rank$r.log" 2>&1 &
  pids+=($!)
done
failed=0
for r in $(seq 0 $((world - 1))); do
  code=0
  wait "${pids[$r]}" || code=$?
  if [ "$code" != 0 ]; then
    failed=1
    echo "rank $r FAILED (exit $code); last lines of $logs/rank$r.log:" >&2
    tail -5 "$logs/rank$r.log" >&2
  fi
done
pids=()
for r in $(seq 0 $((world - 1))); do
  sed -n "s/^step /rank $r: step /p" "$logs/rank$r.log"
done | sort -t' ' -k4,4n -k2,2n
[ "$failed" = 0 ] && echo "all $world ranks finished" || exit 1
