"""Checkpoints on demand, end to end (issue 15 §3): a real dhp-controller, a dhp-worker agent
and its dhp-rank processes train the tiny job on loopback with no periodic checkpoint.

  - `dhpctl checkpoint JOB` makes every rank write a checkpoint at one step, the first step
    boundary after the ranks heard of it (give or take one step), and the resumed attempt
    starts there: no step between the request and the checkpoint is lost;
  - a SIGTERM to one rank (a Kubernetes eviction) or to the agent (which passes it on to its
    ranks) makes every rank checkpoint at the step boundary where it arrived and exit 75; the
    run ends PREEMPTED and the next attempt starts from that step, without spending a restart
    (max_restarts is 0 here, so a counted one would fail the job); a SIGTERM'd agent's node is
    stopping (no new ranks) until the agent registers again;
  - `dhpctl drain NODE` does the same for the job with ranks on the node: the run ends
    PREEMPTED at the step boundary where the ranks heard of it, and the next attempt starts
    there on the other node (the drained one is cordoned until `dhpctl uncordon`);
  - asking a job that has no ranks, or a job that does not exist, is refused with the reason
    (FAILED_PRECONDITION / NOT_FOUND, HTTP 409/404 on REST) and changes nothing.

Usage: preemption_test.py CONTROLLER WORKER DHPCTL CONFIGS_DIR RANK GEN_SHAPES [unittest args]
"""

import os
import re
import signal
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runs_test  # noqa: E402
from dhp_cluster import Binaries, wait_for  # noqa: E402
from runs_test import STEP_LINE, generate_dataset, rank_pids, spec_text  # noqa: E402

ASKED = re.compile(r"the controller asks for a checkpoint at step (\d+)")
SAVED_NOW = re.compile(r"checkpoint now at step (\d+)")
SIGTERM_NOTE = "dhp-rank: SIGTERM: checkpointing at the next step boundary"
DRAIN_NOTE = "the controller asks to checkpoint and stop"
PREEMPTED_AT = re.compile(r"preempted \(SIGTERM[^)]*\): checkpoint at step (\d+)")


class PreemptionTest(runs_test.ClusterJobs, unittest.TestCase):
    def complete_checkpoints(self, job):
        return sorted(int(c["step"]) for c in self.job(job).get("checkpoints", [])
                      if c["state"] == "CHECKPOINT_STATE_COMPLETE")

    def rank_log(self, job, rank, attempt=1):
        code, out, err = self.cluster.dhpctl("logs", job, "--rank", str(rank),
                                             "--attempt", str(attempt))
        self.assertEqual(code, 0, err)
        return out

    def test_checkpoint_now_is_written_by_every_rank_at_the_next_step_and_resumed_from(self):
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "ckpt-now", steps=100000, every=0, keep=3))
        self.wait_step(job, 3)
        self.assertEqual(self.complete_checkpoints(job), [])

        code, out, err = self.cluster.dhpctl("checkpoint", job)
        self.assertEqual(code, 0, err)
        at = int(re.search(r"write it at step (\d+) or the first step boundary after it",
                           out).group(1))
        self.assertGreaterEqual(at, 3)
        steps = wait_for(lambda: self.complete_checkpoints(job), timeout=60,
                         what="the checkpoint asked for")
        self.assertEqual(len(steps), 1, steps)
        saved = steps[0]
        self.assertGreaterEqual(saved, at)

        # On each rank: the step lines before the request reached it, then the checkpoint at
        # that step or the next (a rank that heard of it late is told by the others).
        heard = []
        for rank in (0, 1):
            log = wait_for(lambda: (lambda t: SAVED_NOW.search(t) and t)(self.rank_log(job, rank)),
                           timeout=30, what="rank %d's checkpoint line" % rank)
            self.assertEqual(int(SAVED_NOW.search(log).group(1)), saved, log[-2000:])
            asked = ASKED.search(log)
            if asked is None:
                continue  # this rank's reporter had not heard yet: the other rank's had
            self.assertEqual(int(asked.group(1)), at)
            before = [int(m.group(1)) for m in STEP_LINE.finditer(log[:asked.start()])]
            heard.append(max(before))
        self.assertTrue(heard, "no rank logged hearing of the request")
        self.assertLessEqual(saved - min(heard), 1, "saved at %d, heard after step %s"
                             % (saved, heard))
        events = self.cluster.dhpctl("events", job)[1]
        self.assertIn("checkpoint requested by user: at step %d" % at, events)

        # The job goes on training; a new attempt resumes from that checkpoint.
        self.wait_step(job, saved + 2)
        self.assertEqual(self.complete_checkpoints(job), [saved])  # asked once, written once
        self.assertEqual(self.cluster.dhpctl("cancel", job)[0], 0)
        self.wait_state(job, "CANCELLED")
        code, out, err = self.cluster.dhpctl("resume", job)
        self.assertEqual(code, 0, err)
        self.assertIn("from checkpoint", out)
        runs = self.job(job)["runs"]
        self.assertEqual(int(runs[-1].get("start_step", 0)), saved)
        self.wait_step(job, saved + 1)
        self.assertEqual(self.cluster.dhpctl("cancel", job)[0], 0)
        self.wait_state(job, "CANCELLED")

    def run_of(self, job, attempt):
        return next((r for r in self.job(job)["runs"] if r["attempt"] == attempt), None)

    def check_preempted_at_the_signal(self, job, signalled_rank):
        """Attempt 1 ended PREEMPTED after the ranks checkpointed at the step boundary where the
        SIGTERM reached `signalled_rank` (or the next); attempt 2 starts there, no restart spent.
        Returns that step."""
        wait_for(lambda: (self.run_of(job, 1) or {}).get("state") == "RUN_STATE_PREEMPTED",
                 timeout=60, what="attempt 1 PREEMPTED")
        log = wait_for(lambda: (lambda t: PREEMPTED_AT.search(t) and t)(
            self.rank_log(job, signalled_rank)), timeout=30, what="the preemption line")
        saved = int(PREEMPTED_AT.search(log).group(1))
        note = log.index(SIGTERM_NOTE)
        before = [int(m.group(1)) for m in STEP_LINE.finditer(log[:note])]
        self.assertLessEqual(saved - max(before), 1, "signal after step %d, saved at %d"
                             % (max(before), saved))
        after = [int(m.group(1)) for m in STEP_LINE.finditer(log[note:])]
        self.assertEqual(max(after + before), saved, "trained past the checkpoint")
        got = self.job(job)
        self.assertEqual(int(got["job"].get("restart_count", 0)), 0)
        self.assertEqual(int(self.run_of(job, 2).get("start_step", 0)), saved)
        self.assertIn("not counted as a restart", self.run_of(job, 1)["reason"])
        self.assertIn(saved, self.complete_checkpoints(job))
        return saved

    def test_sigterm_to_a_rank_checkpoints_every_rank_and_requeues_without_a_restart(self):
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "sigterm-rank", steps=100000, every=0))
        self.wait_step(job, 3)
        pids = rank_pids(job, attempt=1, rank=1)
        self.assertEqual(len(pids), 1)
        os.kill(pids[0], signal.SIGTERM)
        saved = self.check_preempted_at_the_signal(job, signalled_rank=1)
        self.wait_step(job, saved + 2)  # attempt 2 trains on, on the same agent
        self.assertEqual(self.state(job), "RUNNING")
        self.assertEqual(self.cluster.dhpctl("cancel", job)[0], 0)
        self.wait_state(job, "CANCELLED")

    def test_sigterm_to_the_agent_preempts_its_ranks_and_the_job_resumes_on_its_return(self):
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "sigterm-agent", steps=100000, every=0))
        self.wait_step(job, 3)
        agent = self.cluster.workers.pop("node-a")
        agent.send_signal(signal.SIGTERM)  # e.g. systemctl stop, a node drain by Kubernetes
        agent.wait(timeout=30)
        saved = self.check_preempted_at_the_signal(job, signalled_rank=0)
        # The agent said it was stopping: its node gets no new ranks until an agent registers.
        node = self.cluster.dhpctl_json("nodes")["nodes"][0]
        self.assertTrue(node.get("stopping"), node)
        self.assertFalse(node.get("cordoned", False))
        self.assertIn(",STOPPING", self.cluster.dhpctl("nodes")[1])
        self.assertEqual(self.state(job), "QUEUED")
        self.start_worker("node-a")
        self.wait_step(job, saved + 2)
        self.assertFalse(self.cluster.dhpctl_json("nodes")["nodes"][0].get("stopping", False))
        self.assertEqual(int(self.job(job)["job"]["current_attempt"]), 2)
        self.assertEqual(self.cluster.dhpctl("cancel", job)[0], 0)
        self.wait_state(job, "CANCELLED")

    def test_a_drained_node_checkpoints_its_job_which_resumes_on_another_node(self):
        self.start_worker("node-a")
        self.start_worker("node-b")
        job = self.submit(spec_text(self.cluster, "drained", steps=100000, every=0))
        self.wait_step(job, 3)
        node = self.run_of(job, 1)["placement"][0]["node_id"]
        other = "node-b" if node == "node-a" else "node-a"
        code, out, err = self.cluster.dhpctl("drain", node, "--reason", "kernel upgrade")
        self.assertEqual(code, 0, err)
        self.assertIn("node %s cordoned" % node, out)
        self.assertIn(job, out)
        wait_for(lambda: (self.run_of(job, 1) or {}).get("state") == "RUN_STATE_PREEMPTED",
                 timeout=60, what="attempt 1 PREEMPTED")
        # Every rank heard of the drain at a step boundary and checkpointed there or at the next.
        saved, heard_by = None, []
        for rank in (0, 1):
            log = wait_for(lambda: (lambda t: PREEMPTED_AT.search(t) and t)(
                self.rank_log(job, rank)), timeout=30, what="rank %d's preemption line" % rank)
            at = int(PREEMPTED_AT.search(log).group(1))
            self.assertIn(saved, (None, at))
            saved = at
            heard = log.find(DRAIN_NOTE)
            if heard < 0:
                continue  # told by the other rank in the step's agreement
            heard_by.append(rank)
            before = [int(m.group(1)) for m in STEP_LINE.finditer(log[:heard])]
            self.assertLessEqual(saved - max(before), 1, "heard after step %d, saved at %d"
                                 % (max(before), saved))
            after = [int(m.group(1)) for m in STEP_LINE.finditer(log[heard:])]
            self.assertEqual(max(after + before), saved, "trained past the checkpoint")
        self.assertTrue(heard_by, "no rank logged the controller's request")
        run1 = self.run_of(job, 1)
        self.assertIn("stopped after node %s was drained (kernel upgrade)" % node, run1["reason"])
        self.assertIn("not counted as a restart", run1["reason"])
        self.assertIn(saved, self.complete_checkpoints(job))
        # The next attempt starts at that step, on the node that is not cordoned.
        self.wait_step(job, saved + 2)
        run2 = self.run_of(job, 2)
        self.assertEqual(int(run2.get("start_step", 0)), saved)
        self.assertEqual({p["node_id"] for p in run2["placement"]}, {other})
        self.assertEqual(int(self.job(job)["job"].get("restart_count", 0)), 0)
        nodes = {n["id"]: n for n in self.cluster.dhpctl_json("nodes")["nodes"]}
        self.assertTrue(nodes[node].get("cordoned"))
        self.assertEqual(nodes[node].get("cordon_reason"), "kernel upgrade")
        self.assertIn("READY,CORDONED", self.cluster.dhpctl("nodes")[1])
        code, out, err = self.cluster.dhpctl("uncordon", node)
        self.assertEqual(code, 0, err)
        self.assertFalse(self.cluster.dhpctl_json("nodes")["nodes"][0].get("cordoned", False))
        self.assertEqual(self.cluster.dhpctl("cancel", job)[0], 0)
        self.wait_state(job, "CANCELLED")
        code, out, err = self.cluster.dhpctl("drain", "node-zz")
        self.assertNotEqual(code, 0)
        self.assertIn("NOT_FOUND", err)
        status, body = self.cluster.http("POST", "/v1/nodes/%s:drain" % node,
                                         '{"reason": "%s"}' % ("x" * 1025))
        self.assertEqual(status, 400, body)
        self.assertIn("reason: 1025 bytes, over the limit of 1024", body)

    def test_checkpoint_of_a_job_without_ranks_or_of_no_job_is_refused(self):
        job = self.submit(spec_text(self.cluster, "no-ranks", steps=5, every=0))  # no worker
        code, out, err = self.cluster.dhpctl("checkpoint", job)
        self.assertNotEqual(code, 0)
        self.assertIn("FAILED_PRECONDITION", err)
        self.assertIn("cannot checkpoint job %s: it is QUEUED" % job, err)
        code, out, err = self.cluster.dhpctl("checkpoint", "j-000000000000")
        self.assertNotEqual(code, 0)
        self.assertIn("NOT_FOUND", err)
        self.assertEqual(self.state(job), "QUEUED")

        status, body = self.cluster.http("POST", "/v1/jobs/%s:checkpoint" % job)
        self.assertEqual(status, 409, body)  # FAILED_PRECONDITION
        self.assertIn("FAILED_PRECONDITION", body)
        status, body = self.cluster.http("POST", "/v1/jobs/j-000000000000:checkpoint")
        self.assertEqual(status, 404, body)
        self.assertEqual(self.state(job), "QUEUED")


if __name__ == "__main__":
    runs_test.BINS = Binaries(*sys.argv[1:5])
    runs_test.RANK = os.path.abspath(sys.argv[5])
    runs_test.GEN_SHAPES = os.path.abspath(sys.argv[6])
    data_tmp = tempfile.TemporaryDirectory(prefix="dhp-preemption-data-")
    runs_test.DATA_ROOT = data_tmp.name
    generate_dataset(runs_test.DATA_ROOT)
    unittest.main(argv=[sys.argv[0]] + sys.argv[7:], verbosity=2)
