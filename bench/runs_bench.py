#!/usr/bin/env python3
"""Run latencies of the tiny CPU job on loopback (real controller, agent and rank processes):

  submit -> first step      from the SubmitJob call until the job reports step 1, split by the
                            job's own event times into queue+placement, launch (agent heartbeat
                            and process start) and bootstrap+first step;
  failure -> training again from SIGKILL of rank 1 until the restarted attempt reports a step
                            past its checkpoint, split into detection, re-placement and relaunch.

Prints a table and writes bench/results/runs.{md,json}. Build first:
  bazel build //controller:dhp-controller //worker/agent:dhp-worker //api/dhpctl:dhpctl \
      //worker/rank:dhp-rank //worker/data:dhp-gen-shapes
  python3 bench/runs_bench.py [--repeats 3] [--heartbeat-ms 200]
"""

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from dhp_cluster import Binaries, Cluster, wait_for  # noqa: E402
from runs_test import rank_pids, spec_text  # noqa: E402


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def event_times(cluster, job):
    """[(time, type, to_state, attempt)] of a job's events."""
    code, out, err = cluster.dhpctl("-o", "json", "events")
    rows = []
    for line in out.splitlines():
        e = json.loads(line)
        if e.get("job_id") != job:
            continue
        rows.append((parse_time(e["time"]), e["type"], e.get("to_state", ""), e.get("attempt", 0)))
    return rows


def first(rows, type_, to, attempt=None):
    for t, ty, st, at in rows:
        if ty == type_ and st == to and (attempt is None or at == attempt):
            return t
    return None


def latest_step(cluster, job):
    return int(cluster.dhpctl_json("get", job)["job"].get("latest_step", 0))


def measure_startup(cluster, name):
    path = spec_text(cluster, name, steps=200, every=2, restarts=1)
    t0 = time.time()
    code, out, err = cluster.dhpctl("submit", "-f", path)
    job = re.search(r"job (j-[0-9a-f]{13})", out).group(1)
    wait_for(lambda: latest_step(cluster, job) >= 1, timeout=120, interval=0.02, what="step 1")
    t1 = time.time()
    rows = event_times(cluster, job)
    scheduled = first(rows, "job.state", "SCHEDULED")
    starting = first(rows, "job.state", "STARTING")
    return job, {"total_s": t1 - t0, "placed_s": scheduled - t0,
                 "launched_s": starting - scheduled, "first_step_s": t1 - starting}


def measure_recovery(cluster, job):
    wait_for(lambda: any(c["state"] == "CHECKPOINT_STATE_COMPLETE"
                         for c in cluster.dhpctl_json("get", job).get("checkpoints", [])),
             timeout=120, interval=0.05, what="a checkpoint")
    t0 = time.time()
    os.kill(rank_pids(job, attempt=1, rank=1)[0], signal.SIGKILL)

    def resumed():
        got = cluster.dhpctl_json("get", job)
        runs = got.get("runs", [])
        if len(runs) < 2 or runs[1].get("state") != "RUN_STATE_RUNNING":
            return False
        return int(got["job"].get("latest_step", 0)) > int(runs[1].get("start_step", 0))

    wait_for(resumed, timeout=120, interval=0.02, what="training again")
    t1 = time.time()
    rows = event_times(cluster, job)
    failed = first(rows, "run.state", "FAILED", 1)
    placed = first(rows, "job.state", "SCHEDULED", 2)
    started = first(rows, "job.state", "STARTING", 2)
    cluster.dhpctl("cancel", job)
    return {"total_s": t1 - t0, "detected_s": failed - t0, "replaced_s": placed - failed,
            "relaunched_s": started - placed, "training_again_s": t1 - started}


def summarize(samples):
    keys = samples[0].keys()
    return {k: {"mean": statistics.mean(s[k] for s in samples),
                "min": min(s[k] for s in samples), "max": max(s[k] for s in samples)}
            for k in keys}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--heartbeat-ms", type=int, default=200)
    ap.add_argument("--bin", default=os.path.join(ROOT, "bazel-bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args()
    b = args.bin
    bins = Binaries(b + "/controller/dhp-controller", b + "/worker/agent/dhp-worker",
                    b + "/api/dhpctl/dhpctl", os.path.join(ROOT, "configs"))
    data = tempfile.TemporaryDirectory(prefix="dhp-runs-bench-")
    subprocess.run([b + "/worker/data/dhp-gen-shapes", "--out", data.name + "/data/shapes",
                    "--count", "64", "--size", "112", "--seed", "7"], check=True,
                   capture_output=True)
    startup, recovery = [], []
    for i in range(args.repeats):
        cluster = Cluster(bins, heartbeat_timeout_ms=3000, heartbeat_interval_ms=args.heartbeat_ms)
        try:
            cluster.start_controller()
            cluster.start_worker("bench", cpu_slots=2, extra_args=[
                "--rank-binary", b + "/worker/rank/dhp-rank", "--data-root", data.name])
            wait_for(lambda: cluster.dhpctl_json("nodes").get("nodes"), what="node")
            job, s = measure_startup(cluster, "bench-%d" % i)
            startup.append(s)
            recovery.append(measure_recovery(cluster, job))
        finally:
            cluster.close()
    result = {"heartbeat_ms": args.heartbeat_ms, "repeats": args.repeats,
              "startup": summarize(startup), "recovery": summarize(recovery),
              "machine": "2 shared CPU cores, loopback; tiny preset, 2 CPU ranks (SP2 x TP2)"}
    lines = ["# Run latencies (tiny job, CPU, loopback)", "",
             "Agent heartbeat %d ms, %d repeats, 2 shared cores. Seconds: mean (min-max)."
             % (args.heartbeat_ms, args.repeats), "",
             "| phase | seconds |", "|---|---|"]
    for section in ("startup", "recovery"):
        for k, v in result[section].items():
            lines.append("| %s: %s | %.2f (%.2f-%.2f) |" % (section, k, v["mean"], v["min"], v["max"]))
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "runs.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "runs.json"), "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
