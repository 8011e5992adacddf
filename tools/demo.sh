#!/usr/bin/env bash
# The demo, end to end on this machine: builds dhp, starts a controller and a worker on
# loopback, generates the synthetic shapes dataset, submits configs/tiny-cpu.yaml (vision SP 2 x
# text TP 2, collocated: two CPU rank processes) and follows it with a progress line until it
# SUCCEEDS; then shows its checkpoints and logs, exports it as a Hugging Face model directory on
# the controller, and shows its metrics. Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."

bazel build //controller:dhp-controller //worker/agent:dhp-worker //api/dhpctl:dhpctl \
  //worker/data:dhp-gen-shapes //worker/rank:dhp-rank //worker/rank:dhp-ckpt
bin=bazel-bin
dhpctl="$bin/api/dhpctl/dhpctl"
work=$(mktemp -d /tmp/dhp-demo.XXXXXX)
pids=()
cleanup() {
  # Newest first: the worker stops (its last heartbeat says so) while the controller still runs.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  echo "(demo data and logs are in $work)"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "generating the synthetic shapes dataset (dhp-gen-shapes)"
"$bin/worker/data/dhp-gen-shapes" --out "$work/data-root/data/shapes" --count 96 --size 112 \
  --seed 7 >"$work/gen-shapes.log" 2>&1
cp -r configs "$work/data-root/"  # the tiny tokenizer, found relative to the data root

step "starting dhp-controller (data in $work/data, loopback only, free ports)"
"$bin/controller/dhp-controller" --data-dir "$work/data" --grpc-port 0 --http-port 0 \
  --port-file "$work/ports.json" --heartbeat-interval-ms 500 \
  --export-dhp-ckpt "$PWD/$bin/worker/rank/dhp-ckpt" --export-data-root "$work/data-root" \
  >"$work/controller.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/ports.json" ] && break; sleep 0.1; done
grpc_port=$(sed -E 's/.*"grpc_port": ([0-9]+).*/\1/' "$work/ports.json")
http_port=$(sed -E 's/.*"http_port": ([0-9]+).*/\1/' "$work/ports.json")
export DHP_SERVER="127.0.0.1:$grpc_port"
echo "gRPC on $DHP_SERVER, REST on http://127.0.0.1:$http_port"

step "starting dhp-worker with 2 CPU slots (it launches the rank processes)"
(cd "$work/data-root" && exec "$OLDPWD/$bin/worker/agent/dhp-worker" --node-id demo-node \
  --cpu-slots 2 --rank-binary "$OLDPWD/$bin/worker/rank/dhp-rank" --data-root . \
  --log-dir "$work/agent-logs") >"$work/worker.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$dhpctl" nodes 2>/dev/null | grep -q READY && break
  sleep 0.1
done
"$dhpctl" nodes

step "a spec with a mistake is refused, naming the field"
sed 's/^  degree: 2$/  degree: 3/' configs/tiny-cpu.yaml >"$work/bad.yaml"
"$dhpctl" submit -f "$work/bad.yaml" || true

step "dhpctl submit -f configs/tiny-cpu.yaml --follow"
set +e
"$dhpctl" submit -f configs/tiny-cpu.yaml --follow
code=$?
set -e
job=$("$dhpctl" list | awk 'NR==2 {print $1}')

step "dhpctl get $job"
"$dhpctl" get "$job"

step "dhpctl checkpoints $job"
"$dhpctl" checkpoints "$job"

step "dhpctl logs $job --rank 0 (last lines)"
"$dhpctl" logs "$job" --rank 0 | tail -n 5

step "dhpctl export $job --on-controller --wait (a Hugging Face model directory)"
set +e
"$dhpctl" export "$job" --on-controller --wait
exported=$?
set -e
ls "$work/data/exports/"*/ 2>/dev/null || true  # the export's files, when it wrote them

step "metrics: curl http://127.0.0.1:$http_port/metrics (excerpt)"
curl -s "http://127.0.0.1:$http_port/metrics" | grep -E '^dhp_(jobs|nodes)\{' | grep -v ' 0$'

state=$("$dhpctl" list | awk 'NR==2 {print $3}')
complete=$("$dhpctl" checkpoints "$job" | grep -c COMPLETE || true)
if [ "$code" != 0 ] || [ "$state" != "SUCCEEDED" ] || [ "$complete" -lt 1 ] ||
  [ "$exported" != 0 ]; then
  echo "demo FAILED: job $job is $state (dhpctl exit $code), $complete complete checkpoints," \
    "export exit $exported" >&2
  echo "controller log: $work/controller.log, worker log: $work/worker.log" >&2
  exit 1
fi
printf '\ndemo OK: job %s SUCCEEDED with %s complete checkpoint(s), exported.\n' "$job" "$complete"
printf 'Next: dhpctl logs %s -f, dhpctl watch %s, dhpctl top %s, curl http://127.0.0.1:%s/v1/jobs/%s\n' \
  "$job" "$job" "$job" "$http_port" "$job"
