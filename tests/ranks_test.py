"""Multi-process training test: dhp-rank processes bootstrap their Gloo process groups through a
real dhp-controller's rendezvous KV and train the tiny model with vision SP 2 x text TP 2.
Usage: ranks_test.py CONTROLLER WORKER DHPCTL CONFIGS_DIR DHP_RANK LAUNCHER [unittest args]."""

import os
import re
import subprocess
import sys
import unittest

from dhp_cluster import Binaries, Cluster

BINS = None
DHP_RANK = None
LAUNCHER = None


class RanksTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(BINS)
        self.cluster.start_controller()
        code, out, err = self.cluster.dhpctl("submit", "-f", self.cluster.config("tiny-cpu.yaml"))
        self.assertEqual(code, 0, err)
        self.job = re.match(r"job (j-[0-9a-f]+) ", out).group(1)

    def tearDown(self):
        self.cluster.close()

    def test_collocated_sp2_tp2_trains_through_the_controller(self):
        env = dict(os.environ, DHP_RANK_BIN=os.path.abspath(DHP_RANK), OMP_WAIT_POLICY="PASSIVE")
        proc = subprocess.run(
            [LAUNCHER, "--controller", self.cluster.server, "--job", self.job,
             "--layout", "2,2,1", "--steps", "2"],
            capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("all 2 ranks finished", proc.stdout)
        losses = re.findall(r"step (\d+) .*loss ([0-9.]+)", proc.stdout)
        self.assertTrue(losses, proc.stdout)
        by_step = {}
        for step, loss in losses:
            by_step.setdefault(step, set()).add(loss)
        self.assertEqual(sorted(by_step), ["0", "1"])
        for step, values in by_step.items():
            self.assertEqual(len(values), 1, "ranks disagree on the loss of step %s" % step)

    def test_a_rank_that_never_arrives_is_named(self):
        proc = subprocess.run(
            [DHP_RANK, "--controller", self.cluster.server, "--job", self.job,
             "--layout", "2,2,1", "--world-rank", "0", "--steps", "1", "--timeout", "3"],
            capture_output=True, text=True, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertRegex(proc.stderr + proc.stdout,
                         r"group world \(also vision, text, vision.sp0, text.tp0\) \(size 2\): rank 1 "
                         r"\(world rank 1\) did not arrive within 3000 ms")

    def test_a_stale_attempt_is_refused(self):
        proc = subprocess.run(
            [DHP_RANK, "--controller", self.cluster.server, "--job", self.job, "--attempt", "2",
             "--layout", "2,2,1", "--world-rank", "0", "--steps", "1", "--timeout", "3"],
            capture_output=True, text=True, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("attempt 2 of job %s is not current" % self.job, proc.stderr + proc.stdout)


if __name__ == "__main__":
    BINS = Binaries(*sys.argv[1:5])
    DHP_RANK, LAUNCHER = os.path.abspath(sys.argv[5]), os.path.abspath(sys.argv[6])
    unittest.main(argv=[sys.argv[0]] + sys.argv[7:], verbosity=2)
