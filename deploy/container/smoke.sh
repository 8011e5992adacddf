#!/bin/sh
# Runs inside the dhp image: a controller, a worker with 2 CPU slots and a 20-step tiny job on
# the synthetic shapes dataset, all on loopback; exits 0 only when the job SUCCEEDED with a
# complete checkpoint. Checks that the image's binaries, shared libraries and example configs
# (/usr/share/dhp/configs) work together. Used by deploy/container/test-image.sh.
set -eu
work=$(mktemp -d /tmp/dhp-smoke.XXXXXX)
configs=/usr/share/dhp/configs
fail() {
  echo "smoke FAILED: $*" >&2
  tail -n 20 "$work/controller.log" "$work/worker.log" >&2 || true
  exit 1
}

# The image's default command's configuration is valid.
dhp-controller --config /etc/dhp/controller.yaml --check-config >/dev/null \
  || fail "/etc/dhp/controller.yaml does not validate"
dhp-gen-shapes --out "$work/root/data/shapes" --count 32 --size 112 --seed 7 >/dev/null
cp -r "$configs" "$work/root/configs"
dhp-controller --data-dir "$work/ctl" --grpc-port 0 --http-port 0 --port-file "$work/ports.json" \
  --heartbeat-interval-ms 500 >"$work/controller.log" 2>&1 &
controller=$!
i=0
while [ ! -s "$work/ports.json" ]; do
  i=$((i + 1)); [ $i -lt 100 ] || fail "the controller wrote no port file"; sleep 0.1
done
DHP_SERVER="127.0.0.1:$(sed -E 's/.*"grpc_port": ([0-9]+).*/\1/' "$work/ports.json")"
export DHP_SERVER
(cd "$work/root" && exec dhp-worker --node-id smoke --cpu-slots 2 --data-root . \
  --log-dir "$work/logs") >"$work/worker.log" 2>&1 &
worker=$!
trap 'kill $worker $controller 2>/dev/null || true' EXIT
i=0
until dhpctl nodes 2>/dev/null | grep -q READY; do
  i=$((i + 1)); [ $i -lt 100 ] || fail "the worker did not register"; sleep 0.1
done

sed -e 's/^  max_steps: 200 .*/  max_steps: 20/' -e 's/^  every_steps: 50 .*/  every_steps: 10/' \
  "$configs/tiny-cpu.yaml" >"$work/job.yaml"
dhpctl submit -f "$work/job.yaml" --follow || fail "dhpctl submit --follow exited $?"
job=$(dhpctl list | awk 'NR==2 {print $1}')
state=$(dhpctl list | awk 'NR==2 {print $3}')
complete=$(dhpctl checkpoints "$job" | grep -c COMPLETE || true)
[ "$state" = SUCCEEDED ] || fail "job $job is $state"
[ "$complete" -ge 1 ] || fail "job $job has no COMPLETE checkpoint"
echo "smoke OK: job $job SUCCEEDED in the image with $complete complete checkpoint(s)"
