"""The Python client (clients/python, installed into .venv) against real dhp processes.

A dhp-controller and a dhp-worker agent with real dhp-rank processes on loopback; everything
below goes through dhp_client only (no dhpctl): the tiny job trains to SUCCEEDED with its
checkpoints, events, logs and listing; a long job is cancelled and resumed (on a new layout;
a bad one refused); errors come back as the exceptions of the controller's codes. Last, on a
controller of its own, 1,003 registered nodes are listed whole, over more than one page, by the
client, dhpctl and REST.

Usage (tools/test.sh, after `pip install clients/python` into .venv):
  .venv/bin/python tests/python_client_test.py CONTROLLER WORKER DHPCTL CONFIGS RANK GEN_SHAPES
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dhp_cluster import Binaries, Cluster, wait_for  # noqa: E402
from runs_test import spec_text  # noqa: E402

import dhp_client  # noqa: E402
from dhp_client.pb import job_pb2, node_pb2  # noqa: E402

BINS = RANK = GEN_SHAPES = None


def names(events):
    return [(e.type, e.to_state) for e in events]


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = tempfile.TemporaryDirectory(prefix="dhp-pyclient-data-")
        subprocess.run([GEN_SHAPES, "--out", os.path.join(cls.data.name, "data", "shapes"),
                        "--count", "64", "--size", "112", "--seed", "7"],
                       check=True, capture_output=True)
        cls.cluster = Cluster(BINS, heartbeat_timeout_ms=3000, heartbeat_interval_ms=200)
        cls.cluster.start_controller()
        cls.cluster.start_worker("node-a", cpu_slots=2, extra_args=[
            "--rank-binary", RANK, "--data-root", cls.data.name, "--stop-grace-ms", "3000"])
        cls.client = dhp_client.Client("127.0.0.1:%d" % cls.cluster.grpc_port)
        wait_for(lambda: [n for n in cls.client.nodes() if n.state == node_pb2.NODE_STATE_READY], timeout=20,
                 what="node-a READY")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.close()
        cls.data.cleanup()

    def test_1_the_tiny_job_trains_to_success(self):
        c = self.client
        job = c.submit(spec_text(self.cluster, "py-tiny", steps=12, every=4))
        self.assertIn(job.state, (job_pb2.JOB_STATE_QUEUED, job_pb2.JOB_STATE_SCHEDULED))
        self.assertTrue(job.id.startswith("j-"))
        events = list(c.watch(job.id))  # follows until the job is final
        self.assertIn(("job.state", "SUCCEEDED"), names(events), names(events))
        self.assertIn(("run.state", "RUNNING"), names(events))
        got = c.get(job.id)
        self.assertEqual(got.job.state, job_pb2.JOB_STATE_SUCCEEDED)
        self.assertEqual(len(got.runs), 1)
        self.assertEqual(got.runs[0].last_step, 12)
        self.assertGreater(got.runs[0].last_loss, 0)
        complete = [k for k in got.checkpoints if k.state == job_pb2.CHECKPOINT_STATE_COMPLETE]
        self.assertTrue(complete)
        self.assertEqual(max(k.step for k in complete), 12)
        self.assertEqual({s.rank for s in complete[-1].shards}, {0, 1})
        # Logs: both ranks wrote, and following a finished attempt ends.
        chunks = list(c.logs(job.id, follow=True))
        self.assertEqual({ch.world_rank for ch in chunks}, {0, 1})
        text = b"".join(ch.data for ch in chunks if ch.world_rank == 0).decode()
        self.assertIn("step", text)
        # Listing and filters.
        self.assertIn(job.id, [j.id for j in c.list(states=["succeeded"])])
        self.assertNotIn(job.id, [j.id for j in c.list(states=[job_pb2.JOB_STATE_RUNNING])])
        self.assertIn(job.id, [j.id for j in c.list(labels={"purpose": "demo"})])
        self.assertEqual(c.list(labels={"purpose": "none"}), [])
        self.assertEqual(len(c.list(limit=1)), 1)
        # History replay without follow ends at once, and `after` skips what was seen.
        replay = list(c.watch(job.id, follow=False))
        self.assertEqual(names(replay), names(events))
        self.assertEqual(list(c.watch(job.id, after=events[-1].id, follow=False)), [])
        node = c.nodes()[0]
        self.assertEqual((node.id, node.resources.cpu_slots), ("node-a", 2))

    def test_2_cancel_and_resume(self):
        c = self.client
        job = c.submit(spec_text(self.cluster, "py-long", steps=100000, every=0))
        for e in c.watch(job.id):
            if (e.type, e.to_state) == ("run.state", "RUNNING"):
                break
        self.assertEqual(c.cancel(job.id, reason="from python").state,
                         job_pb2.JOB_STATE_CANCELLING)
        self.assertEqual(c.wait(job.id, timeout=60).state, job_pb2.JOB_STATE_CANCELLED)
        # A layout the tiny model cannot take is refused, naming the field; nothing changes.
        with self.assertRaises(dhp_client.InvalidArgument) as bad:
            c.resume(job.id, text_degree=3)
        self.assertTrue(bad.exception.message.startswith(
            "resume: text_degree 3: text.degree: 3 does not divide the 4 attention heads"),
            bad.exception.message)
        self.assertEqual(c.get(job.id).job.current_attempt, 1)
        # No checkpoint was written (every=0): attempt 2 starts afresh on one rank.
        resumed = c.resume(job.id, vision_degree=1, text_degree=1, placement="collocate")
        self.assertEqual(resumed.run.attempt, 2)
        self.assertIn(resumed.job.state,
                      (job_pb2.JOB_STATE_QUEUED, job_pb2.JOB_STATE_SCHEDULED))
        self.assertEqual((resumed.job.spec.vision.degree, resumed.job.spec.text.degree), (1, 1))
        self.assertEqual(resumed.job.message,
                         "resumed by user from the start (no complete checkpoint) on layout "
                         "vision 1 (sp) x text 1 x dp 1, collocated (was vision 2 (sp) x text 2 "
                         "x dp 1, collocated)")
        c.cancel(job.id)
        self.assertEqual(c.wait(job.id, timeout=60).state, job_pb2.JOB_STATE_CANCELLED)
        runs = c.get(job.id).runs
        self.assertEqual([r.reason for r in runs][0], "from python")
        self.assertTrue(dhp_client.is_final(c.get(job.id).job.state))

    def test_3_errors_are_exceptions_with_the_controllers_code_and_message(self):
        c = self.client
        with self.assertRaises(dhp_client.InvalidArgument) as bad:
            c.submit({"name": "x", "model": {"preset": "tiny"}, "vision": {"degre": 2}})
        self.assertIn("vision.degre: unknown key", bad.exception.message)
        with self.assertRaises(dhp_client.NotFound) as missing:
            c.get("j-000000000000")
        self.assertEqual(str(missing.exception), "NOT_FOUND: job j-000000000000 not found")
        done = c.list(states=["succeeded"])[0]
        with self.assertRaises(dhp_client.FailedPrecondition):
            c.cancel(done.id)
        # A spec as a dict, validated only: every default filled in, nothing stored.
        spec = {"name": "py-dry", "model": {"preset": "tiny"}, "training": {"max_steps": 3},
                "data": {"datasets": ["s"], "registry": {"s": {"annotation_path": "a.jsonl"}}}}
        before = len(c.list())
        dry = c.submit(spec, dry_run=True)
        self.assertEqual(dry.spec.vision.degree, 1)
        self.assertEqual(dry.spec.checkpoint.directory, "py-dry")
        self.assertEqual(len(c.list()), before)
        # Auth: a controller with a token refuses a client without it, accepts one with it.
        secured = Cluster(BINS)
        try:
            token_file = os.path.join(secured.tmp.name, "token")
            with open(token_file, "w") as f:
                f.write("py-s3cret\n")
            secured.start_controller(extra_args=["--auth-token-file", token_file])
            address = "127.0.0.1:%d" % secured.grpc_port
            with self.assertRaises(dhp_client.Unauthenticated):
                dhp_client.Client(address, token="wrong").list()
            self.assertEqual(dhp_client.Client(address, token_file=token_file).list(), [])
        finally:
            secured.close()
        with self.assertRaises(dhp_client.Unavailable):
            dhp_client.Client("127.0.0.1:1", timeout=2).list()

    def test_4_drain_and_uncordon_a_node(self):
        c = self.client
        with self.assertRaises(dhp_client.NotFound):
            c.drain_node("node-zz")
        with self.assertRaises(dhp_client.InvalidArgument) as long_reason:
            c.drain_node("node-a", reason="x" * 1025)
        self.assertEqual(long_reason.exception.message,
                         "reason: 1025 bytes, over the limit of 1024")
        self.assertFalse(c.nodes()[0].cordoned)  # nothing changed
        drained = c.drain_node("node-a", reason="py maintenance")
        self.assertTrue(drained.node.cordoned)
        self.assertEqual(drained.node.cordon_reason, "py maintenance")
        node = c.nodes()[0]
        self.assertTrue(node.cordoned)
        self.assertEqual(node.state, node_pb2.NODE_STATE_READY)  # alive, only not schedulable
        # A job waits while the only node is cordoned, and runs once it is uncordoned.
        job = c.submit(spec_text(self.cluster, "py-cordoned", steps=2, every=0))
        time.sleep(1.5)
        self.assertEqual(c.get(job.id).job.state, job_pb2.JOB_STATE_QUEUED)
        self.assertFalse(c.uncordon_node("node-a").cordoned)
        self.assertEqual(c.wait(job.id, timeout=120).state, job_pb2.JOB_STATE_SUCCEEDED)


class ManyNodesTest(unittest.TestCase):
    """Past one page of ListNodes (1,000), the client, dhpctl and REST still see every node."""

    def test_every_page_of_nodes_is_read(self):
        from dhp_client._gen.dhp.v1 import service_pb2, service_pb2_grpc
        import grpc
        cluster = Cluster(BINS)
        try:
            cluster.start_controller()
            target = "127.0.0.1:%d" % cluster.grpc_port
            with grpc.insecure_channel(target) as channel:
                workers = service_pb2_grpc.WorkerServiceStub(channel)
                for i in range(1003):
                    node = node_pb2.Node(id="m-%04d" % i, hostname="m-%04d" % i,
                                         resources=node_pb2.NodeResources(cpu_slots=1))
                    workers.RegisterNode(service_pb2.RegisterNodeRequest(node=node), timeout=10)
            want = ["m-%04d" % i for i in range(1003)]
            with dhp_client.Client(target) as c:
                self.assertEqual([n.id for n in c.nodes()], want)
            self.assertEqual([n["id"] for n in cluster.dhpctl_json("nodes")["nodes"]], want)
            status, body = cluster.http("GET", "/v1/nodes")
            self.assertEqual(status, 200, body)
            first = json.loads(body)
            self.assertEqual(len(first["nodes"]), 1000)
            status, body = cluster.http(
                "GET", "/v1/nodes?page_size=1000&page_token=" + first["next_page_token"])
            self.assertEqual(status, 200, body)
            rest = json.loads(body)
            self.assertEqual([n["id"] for n in rest["nodes"]], want[1000:])
            self.assertEqual(rest.get("next_page_token", ""), "")  # empty on the last page
            status, body = cluster.http("GET", "/v1/nodes?page_token=bogus")
            self.assertEqual(status, 400, body)
            self.assertIn("is not a token returned by ListNodes", body)
        finally:
            cluster.close()


if __name__ == "__main__":
    BINS = Binaries(*sys.argv[1:5])
    RANK = os.path.abspath(sys.argv[5])
    GEN_SHAPES = os.path.abspath(sys.argv[6])
    unittest.main(argv=sys.argv[:1] + sys.argv[7:], verbosity=2)
