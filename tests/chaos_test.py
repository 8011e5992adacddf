"""Chaos: random SIGKILLs of ranks, agents and the controller while a job trains.

A real dhp-controller, one dhp-worker agent and its dhp-rank processes on loopback train the
tiny job for 60 steps with a checkpoint every 3. A fault-free run of the same spec comes first.
Then, at random times (seeded: DHP_CHAOS_SEED), each kind of process in turn, in a random order,
is killed with SIGKILL and, for an agent or the controller, started again (the controller on the
same ports and data directory).
Afterwards:
  - the job SUCCEEDED;
  - every loss any attempt logged equals the fault-free run's at that step, as printed (all 17
    digits), and every step was trained;
  - no attempt started twice: no attempt logged a step twice (a dead attempt started again by
    a restarted agent trains from its first step again), there are at most one attempt per kill
    more than the first, and agent restarts spent no restart (restart_count <= the rank and
    controller kills);
  - no event and no COMPLETE checkpoint was lost: what was there before a controller kill is
    still there after it, unless an event records the checkpoint's deletion by keep_latest;
  - no dhp-rank process of the job is left.

Usage: chaos_test.py CONTROLLER WORKER DHPCTL CONFIGS_DIR RANK GEN_SHAPES [unittest args]
Environment: DHP_CHAOS_KILLS (default 6), DHP_CHAOS_SEED (default 20261124).
"""

import json
import os
import random
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runs_test  # noqa: E402
from dhp_cluster import Binaries, wait_for  # noqa: E402
from runs_test import STEP_LINE, generate_dataset, rank_pids, spec_text  # noqa: E402

STEPS = 60
KILLS = int(os.environ.get("DHP_CHAOS_KILLS", "6"))
SEED = int(os.environ.get("DHP_CHAOS_SEED", "20261124"))


class ChaosTest(runs_test.ClusterJobs, unittest.TestCase):
    def restart_controller(self):
        self.cluster.kill_controller(signal.SIGKILL)
        time.sleep(0.3)
        self.cluster.start_controller(grpc_port=self.cluster.grpc_port,
                                      http_port=self.cluster.http_port)

    def restart_agent(self):
        proc = self.cluster.workers.pop("node-a")
        proc.kill()
        proc.wait()
        time.sleep(0.3)
        self.start_worker("node-a")

    @staticmethod
    def fault_order(rng, kills):
        """Each kind of fault equally often, in a random order."""
        kinds = (["rank", "agent", "controller"] * kills)[:kills]
        rng.shuffle(kinds)
        return kinds

    def kill(self, kind, job, rng):
        """SIGKILLs a rank of the job, the agent or the controller (restarting those two).
        False when there was nothing to kill (no rank process at that moment)."""
        if kind == "rank":
            pids = rank_pids(job)
            if not pids:
                return False
            os.kill(rng.choice(pids), signal.SIGKILL)
        elif kind == "agent":
            self.restart_agent()
        else:
            self.restart_controller()
        return True

    def check_losses(self, job, expected):
        """Every loss any attempt of the job logged equals `expected` at its step, and no
        attempt logged a step twice; returns the steps trained."""
        trained = set()
        for run in self.job(job)["runs"]:
            code, out, err = self.cluster.dhpctl("logs", job, "--rank", "0",
                                                 "--attempt", str(run["attempt"]))
            self.assertEqual(code, 0, err)
            steps = []
            for m in STEP_LINE.finditer(out):
                step = int(m.group(1))
                self.assertEqual(m.group(3), expected[step],
                                 "attempt %s, step %d" % (run["attempt"], step))
                steps.append(step)
            self.assertEqual(len(steps), len(set(steps)),
                             "attempt %s trained a step twice (started twice?): %s"
                             % (run["attempt"], steps))
            trained.update(steps)
        return trained

    def reference_losses(self, steps):
        """Trains the spec once without faults; {step: loss} of its rank 0."""
        reference = self.submit(spec_text(self.cluster, "reference", steps=steps, every=3))
        self.wait_state(reference, "SUCCEEDED")
        wait_for(lambda: len(self.losses(reference)) == steps, timeout=30, what="reference logs")
        return self.losses(reference)

    def kept(self, job):
        """(event ids, COMPLETE checkpoint ids) the controller has for the job."""
        got = self.job(job)
        complete = {c["id"] for c in got.get("checkpoints", [])
                    if c["state"] == "CHECKPOINT_STATE_COMPLETE"}
        code, out, err = self.cluster.dhpctl("-o", "json", "events", job)
        self.assertEqual(code, 0, err)
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        return {int(e["id"]) for e in events}, complete, events

    def test_an_agent_restart_ends_its_attempt_at_once_without_spending_a_restart(self):
        """SIGKILL the agent (its ranks die with it) and start it again well within the
        heartbeat timeout: the controller ends attempt 1 naming the restart, the new agent never
        starts attempt 1 again, and attempt 2 resumes from the newest checkpoint, with
        max_restarts 0."""
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "agent-restart", steps=100000, every=3,
                                    restarts=0, keep=2))
        wait_for(lambda: any(c["state"] == "CHECKPOINT_STATE_COMPLETE"
                             for c in self.job(job).get("checkpoints", [])),
                 timeout=120, what="a complete checkpoint")
        self.restart_agent()
        runs = wait_for(lambda: (lambda r: len(r) >= 2 and r)(self.job(job)["runs"]),
                        timeout=30, what="attempt 2")
        self.assertEqual(runs[0]["state"], "RUN_STATE_FAILED")
        self.assertIn("the agent restarted", runs[0]["reason"])
        self.assertIn("not counted as a restart", runs[0]["reason"])
        start = int(runs[1].get("start_step", 0))
        self.assertGreater(start, 0)
        wait_for(lambda: int(self.job(job)["job"].get("latest_step", 0)) >= start + 3,
                 timeout=120, what="attempt 2 training")
        got = self.job(job)
        self.assertEqual(int(got["job"].get("restart_count", 0)), 0)
        self.assertEqual(int(got["job"]["current_attempt"]), 2)
        code, out, err = self.cluster.dhpctl("logs", job, "--rank", "0", "--attempt", "1")
        steps = [int(m.group(1)) for m in STEP_LINE.finditer(out)]
        self.assertEqual(len(steps), len(set(steps)), "attempt 1 started twice: %s" % steps)
        self.assertEqual(self.cluster.dhpctl("cancel", job)[0], 0)
        self.wait_state(job, "CANCELLED")

    def test_random_kills_change_no_loss_and_lose_nothing(self):
        rng = random.Random(SEED)
        self.start_worker("node-a")
        expected = self.reference_losses(STEPS)

        job = self.submit(spec_text(self.cluster, "chaos", steps=STEPS, every=3,
                                    restarts=3 * KILLS + 2, stall=120, keep=2))
        done = []
        for kind in self.fault_order(rng, KILLS):
            time.sleep(rng.uniform(0.3, 1.5))
            if self.state(job) in ("SUCCEEDED", "FAILED"):
                break
            if kind == "controller":
                events_before, complete_before, _ = self.kept(job)
            if not self.kill(kind, job, rng):
                continue
            if kind == "controller":
                events_after, complete_after, events = self.kept(job)
                self.assertLessEqual(events_before, events_after, "events lost")
                deleted = " ".join(e.get("reason", "") for e in events
                                   if e.get("to_state") == "DELETED")
                for c in complete_before - complete_after:
                    self.assertIn("checkpoint %s at step" % c, deleted,
                                  "COMPLETE checkpoint %s lost" % c)
            done.append(kind)
        print("chaos: seed %d, kills %s" % (SEED, done), file=sys.stderr)

        self.wait_state(job, "SUCCEEDED", timeout=300)
        # The agent ships a rank's last lines after the rank exits: they may reach the
        # controller just after the job SUCCEEDED (every loss that arrives is still compared).
        wait_for(lambda: len(self.check_losses(job, expected)) == STEPS, timeout=30,
                 what="every step's loss in the ranks' logs")
        self.assertEqual(sorted(self.check_losses(job, expected)), list(range(1, STEPS + 1)))
        got = self.job(job)
        counted = sum(1 for k in done if k in ("rank", "controller"))
        self.assertLessEqual(int(got["job"].get("restart_count", 0)), counted,
                             "agent restarts spent restarts: kills %s" % done)
        self.assertLessEqual(len(got["runs"]), 1 + len(done), "more attempts than kills")
        complete = sorted(int(c["step"]) for c in got.get("checkpoints", [])
                          if c["state"] == "CHECKPOINT_STATE_COMPLETE")
        self.assertEqual(complete[-1], STEPS)
        wait_for(lambda: rank_pids(job) == [], timeout=20, what="no rank process left")


if __name__ == "__main__":
    runs_test.BINS = Binaries(*sys.argv[1:5])
    runs_test.RANK = os.path.abspath(sys.argv[5])
    runs_test.GEN_SHAPES = os.path.abspath(sys.argv[6])
    data_tmp = tempfile.TemporaryDirectory(prefix="dhp-chaos-data-")
    runs_test.DATA_ROOT = data_tmp.name
    generate_dataset(runs_test.DATA_ROOT)
    unittest.main(argv=[sys.argv[0]] + sys.argv[7:], verbosity=2)
