#!/usr/bin/env python3
"""Recovery time per kind of fault: the long version of tests/chaos_test.py.

A real controller, one agent and its ranks on loopback train the tiny job (checkpoint every 3
steps) while N SIGKILLs hit, in a seeded random order, a rank, the agent (started again) or the
controller (started again on the same ports and data directory), one at a time. For each kill,
the recovery time is from the kill until the job's current run reports a step it had not
reported before (a new attempt: any step past its start). The job must still SUCCEED with the
fault-free run's losses (checked as in the test). Prints a table and writes
bench/results/chaos.{md,json}.

  bazel build //controller:dhp-controller //worker/agent:dhp-worker //api/dhpctl:dhpctl \\
      //worker/rank:dhp-rank //worker/data:dhp-gen-shapes
  python3 bench/chaos_bench.py [--kills 30] [--seed 7]
"""

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import runs_test  # noqa: E402
from chaos_test import ChaosTest  # noqa: E402
from dhp_cluster import Binaries, wait_for  # noqa: E402
from runs_test import generate_dataset, spec_text  # noqa: E402


class Bench(ChaosTest):
    def runTest(self):  # unittest needs one; the bench calls run() itself
        pass

    def position(self, job):
        """(current attempt, the newest step its run reported)."""
        got = self.job(job)
        attempt = int(got["job"].get("current_attempt", 0))
        for run in got.get("runs", []):
            if int(run["attempt"]) == attempt:
                return attempt, int(run.get("last_step", 0)), int(run.get("start_step", 0))
        return attempt, 0, 0

    def recovered(self, job, attempt0, step0):
        try:
            attempt, last, start = self.position(job)
        except AssertionError:  # the controller is not back yet
            return False
        if self.state(job) == "SUCCEEDED":
            return True
        return last > step0 if attempt == attempt0 else last > start

    def run_bench(self, kills, seed, steps):
        rng = random.Random(seed)
        self.setUp()
        try:
            self.start_worker("node-a")
            t0 = time.time()
            expected = self.reference_losses(steps)
            fault_free_s = time.time() - t0  # includes reading the logs back (about 0.1 s)
            job = self.submit(spec_text(self.cluster, "chaos", steps=steps, every=3,
                                        restarts=3 * kills + 2, stall=120, keep=2))
            t0 = time.time()
            self.wait_state(job, "RUNNING")
            recoveries = {"rank": [], "agent": [], "controller": []}
            for kind in self.fault_order(rng, kills):
                time.sleep(rng.uniform(0.3, 1.5))
                if self.state(job) == "SUCCEEDED":
                    break
                attempt0, step0, _ = self.position(job)
                start = time.time()
                if not self.kill(kind, job, rng):
                    continue
                wait_for(lambda: self.recovered(job, attempt0, step0), timeout=180, interval=0.1,
                         what="training again after a %s kill" % kind)
                recoveries[kind].append(time.time() - start)
            self.wait_state(job, "SUCCEEDED", timeout=600)
            chaos_s = time.time() - t0
            self.check_losses(job, expected)
            got = self.job(job)
            return recoveries, fault_free_s, chaos_s, len(got["runs"])
        finally:
            self.tearDown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    bazel_bin = os.path.join(ROOT, "bazel-bin")
    runs_test.BINS = Binaries(os.path.join(bazel_bin, "controller/dhp-controller"),
                              os.path.join(bazel_bin, "worker/agent/dhp-worker"),
                              os.path.join(bazel_bin, "api/dhpctl/dhpctl"),
                              os.path.join(ROOT, "configs"))
    runs_test.RANK = os.path.join(bazel_bin, "worker/rank/dhp-rank")
    runs_test.GEN_SHAPES = os.path.join(bazel_bin, "worker/data/dhp-gen-shapes")
    data = tempfile.TemporaryDirectory(prefix="dhp-chaos-bench-")
    runs_test.DATA_ROOT = data.name
    generate_dataset(data.name)

    recoveries, fault_free_s, chaos_s, attempts = Bench().run_bench(args.kills, args.seed,
                                                                    args.steps)
    rows = []
    for kind in ("rank", "agent", "controller"):
        r = recoveries[kind]
        rows.append({"fault": kind, "kills": len(r),
                     "median_s": statistics.median(r) if r else None,
                     "max_s": max(r) if r else None})
    lines = ["| fault (SIGKILL) | kills | recovery median s | recovery max s |",
             "|---|---:|---:|---:|"]
    for row in rows:
        fmt = lambda v: "-" if v is None else "%.2f" % v  # noqa: E731
        lines.append("| %s | %d | %s | %s |" % (row["fault"], row["kills"], fmt(row["median_s"]),
                                               fmt(row["max_s"])))
    summary = ("tiny job, %d steps, checkpoint every 3: fault-free %.1f s; with the kills %.1f s "
               "over %d attempts; losses equal to the fault-free run's at every step"
               % (args.steps, fault_free_s, chaos_s, attempts))
    table = "\n".join(lines) + "\n\n" + summary + "\n"
    print(table)
    out = os.path.join(ROOT, "bench", "results")
    with open(os.path.join(out, "chaos.json"), "w") as f:
        json.dump({"seed": args.seed, "kills": args.kills, "steps": args.steps, "rows": rows,
                   "fault_free_s": fault_free_s, "chaos_s": chaos_s, "attempts": attempts,
                   "recoveries_s": recoveries}, f, indent=1)
    with open(os.path.join(out, "chaos.md"), "w") as f:
        f.write("# Recovery from SIGKILLs (bench/chaos_bench.py)\n\n")
        f.write("`python3 bench/chaos_bench.py --kills %d --seed %d --steps %d` on %s, %d cores, "
                "loopback, one agent with 2 CPU rank slots, heartbeat timeout 3 s.\n\n"
                % (args.kills, args.seed, args.steps, time.strftime("%Y-%m-%d"),
                   os.cpu_count()))
        f.write("Recovery: from the kill until the job's current run reports a step it had not "
                "reported before (a new attempt: any step past its start); measured by polling "
                "dhpctl get every 0.1 s (%s).\n\n" % platform.platform())
        f.write(table)
    print("wrote bench/results/chaos.{md,json}")


if __name__ == "__main__":
    main()
