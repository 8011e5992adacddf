#!/usr/bin/env bash
# The demo, end to end on this machine: builds dhp, starts a controller and a worker on
# loopback, submits configs/tiny-cpu.yaml with dhpctl, and shows the job, the registered
# worker, the REST view and the metrics. Leaves nothing running.
#
# The scheduler does not launch jobs yet, so the submitted job stays QUEUED: that is the
# expected end state for the control plane. The demo then trains the same tiny model on one
# rank with dhp-train, on a freshly generated synthetic dataset, to show the compute path.
set -euo pipefail
cd "$(dirname "$0")/.."

bazel build //controller:dhp-controller //worker/agent:dhp-worker //api/dhpctl:dhpctl \
  //worker/data:dhp-gen-shapes //worker/rank:dhp-train
bin=bazel-bin
work=$(mktemp -d /tmp/dhp-demo.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "(demo data and logs are in $work)"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "starting dhp-controller (data in $work, loopback only, free ports)"
"$bin/controller/dhp-controller" --data-dir "$work/data" --grpc-port 0 --http-port 0 \
  --port-file "$work/ports.json" >"$work/controller.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/ports.json" ] && break; sleep 0.1; done
grpc_port=$(sed -E 's/.*"grpc_port": ([0-9]+).*/\1/' "$work/ports.json")
http_port=$(sed -E 's/.*"http_port": ([0-9]+).*/\1/' "$work/ports.json")
export DHP_SERVER="127.0.0.1:$grpc_port"
echo "gRPC on $DHP_SERVER, REST on http://127.0.0.1:$http_port"

step "starting dhp-worker with 2 CPU slots"
"$bin/worker/agent/dhp-worker" --node-id demo-node --cpu-slots 2 >"$work/worker.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  "$bin/api/dhpctl/dhpctl" nodes 2>/dev/null | grep -q READY && break
  sleep 0.1
done

step "dhpctl submit -f configs/tiny-cpu.yaml"
"$bin/api/dhpctl/dhpctl" submit -f configs/tiny-cpu.yaml
job=$("$bin/api/dhpctl/dhpctl" list | awk 'NR==2 {print $1}')

step "dhpctl list"
"$bin/api/dhpctl/dhpctl" list

step "dhpctl nodes"
"$bin/api/dhpctl/dhpctl" nodes

step "dhpctl get $job"
"$bin/api/dhpctl/dhpctl" get "$job"

step "the same job over REST: curl http://127.0.0.1:$http_port/v1/jobs/$job"
curl -s "http://127.0.0.1:$http_port/v1/jobs/$job" | head -c 400
echo " ..."

step "a spec with a mistake is refused, naming the field"
sed 's/^  degree: 2$/  degree: 3/' configs/tiny-cpu.yaml | head -c 100000 >"$work/bad.yaml"
"$bin/api/dhpctl/dhpctl" submit -f "$work/bad.yaml" || true

step "metrics: curl http://127.0.0.1:$http_port/metrics (excerpt)"
curl -s "http://127.0.0.1:$http_port/metrics" | grep -E '^dhp_(jobs|nodes)\{' 

step "dhpctl events"
"$bin/api/dhpctl/dhpctl" events

state=$("$bin/api/dhpctl/dhpctl" list | awk 'NR==2 {print $3}')
node_state=$("$bin/api/dhpctl/dhpctl" nodes | awk 'NR==2 {print $2}')
if [ "$state" != "QUEUED" ] || [ "$node_state" != "READY" ]; then
  echo "demo FAILED: job is $state, node is $node_state" >&2
  exit 1
fi

step "training the tiny model on one rank: dhp-gen-shapes + dhp-train (80 steps)"
"$bin/worker/data/dhp-gen-shapes" --out "$work/data-root/data/shapes" --count 96 --size 112 \
  --seed 7 >"$work/gen-shapes.log" 2>&1
OMP_WAIT_POLICY=PASSIVE "$bin/worker/rank/dhp-train" -f configs/tiny-cpu.yaml \
  --data-root "$work/data-root" --steps 80 --log-every 10 | tee "$work/train.log"
first_last=$(tail -n 1 "$work/train.log")

printf '\ndemo OK: job %s is QUEUED, worker demo-node is READY, and local training ran:\n%s\n' \
  "$job" "$first_last"
