#!/usr/bin/env bash
# Starts every rank of one layout on this machine (loopback) against a RUNNING controller, until
# the scheduler places ranks itself: one dhp-rank process per world rank, logs under a temp dir,
# exit status non-zero if any rank failed (its log tail is printed). Kills the ranks it started on
# exit or Ctrl-C.
#
#   tools/launch_ranks.sh --controller 127.0.0.1:7070 --job J [--attempt 1] --layout 2,2,1 \
#                         [--separate] [--vision-tp] [--steps 3] [-- extra dhp-rank flags]
# The job must exist in the controller with that attempt current (the rendezvous KV checks it).
# The world size follows the layout: collocated max(Sv,Tt)*dp, separate (Sv+Tt)*dp.
set -euo pipefail
cd "$(dirname "$0")/.."

controller="${DHP_SERVER:-127.0.0.1:7070}" job="" attempt=1 layout="1,1,1" steps=3
separate=0 vision_tp=0 extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --controller) controller="$2"; shift 2 ;;
    --job) job="$2"; shift 2 ;;
    --attempt) attempt="$2"; shift 2 ;;
    --layout) layout="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --separate) separate=1; shift ;;
    --vision-tp) vision_tp=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "launch_ranks.sh: unknown flag $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
[ -n "$job" ] || { echo "launch_ranks.sh: --job is required" >&2; exit 2; }
IFS=, read -r sv tt dp <<<"$layout"
if [ "$separate" = 1 ]; then world=$(( (sv + tt) * dp )); else world=$(( (sv > tt ? sv : tt) * dp )); fi

bin="${DHP_RANK_BIN:-bazel-bin/worker/rank/dhp-rank}"
[ -x "$bin" ] || bazel build //worker/rank:dhp-rank
flags=(--controller "$controller" --job "$job" --attempt "$attempt" --layout "$layout" --steps "$steps")
[ "$separate" = 1 ] && flags+=(--separate)
[ "$vision_tp" = 1 ] && flags+=(--vision-tp)

logs=$(mktemp -d /tmp/dhp-ranks.XXXXXX)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
echo "launching $world ranks of layout $layout (job $job attempt $attempt), logs in $logs"
for r in $(seq 0 $((world - 1))); do
  "$bin" "${flags[@]}" --world-rank "$r" "${extra[@]}" >"$logs/rank$r.log" 2>&1 &
  pids+=($!)
done
failed=0
for r in $(seq 0 $((world - 1))); do
  if ! wait "${pids[$r]}"; then
    failed=1
    echo "rank $r FAILED; last lines of $logs/rank$r.log:" >&2
    tail -5 "$logs/rank$r.log" >&2
  fi
done
pids=()
grep -h " step " "$logs"/rank*.log | sort -k2,2n -k4,4n || true
[ "$failed" = 0 ] && echo "all $world ranks finished" || exit 1
