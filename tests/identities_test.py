"""Per-identity credentials (issue 14 §4) against a real controller, agent and ranks.

A dhp-controller whose config file names users (alice and bob: role user; vera: viewer) and
nodes (node-a, node-b), each by the SHA-256 of its token, plus an admin token. A dhp-worker
agent runs as node-a with node-a's token; its ranks get their own tokens from the controller,
for their job and attempt only, and train alice's job to the end. Then every case the issue
reproduced is tried with clients we did not write (Python's urllib for REST, grpcio through
dhp_client for gRPC): a node posing as another, KV writes into a queued job's scope, a fake
checkpoint, another user's job cancelled, a viewer submitting.

Usage (tools/test.sh, with dhp_client installed into .venv):
  .venv/bin/python tests/identities_test.py CONTROLLER WORKER DHPCTL CONFIGS RANK GEN_SHAPES
"""

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dhp_cluster import Binaries, Cluster, wait_for  # noqa: E402
from runs_test import spec_text  # noqa: E402

import dhp_client  # noqa: E402
from dhp_client.pb import job_pb2, node_pb2  # noqa: E402

BINS = RANK = GEN_SHAPES = None
TOKENS = {"admin": "admin-token-1", "alice": "alice-token-2", "bob": "bob-token-3",
          "vera": "vera-token-4", "node-a": "node-a-token-5", "node-b": "node-b-token-6"}


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


class IdentitiesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = tempfile.TemporaryDirectory(prefix="dhp-ids-data-")
        subprocess.run([GEN_SHAPES, "--out", os.path.join(cls.data.name, "data", "shapes"),
                        "--count", "64", "--size", "112", "--seed", "7"],
                       check=True, capture_output=True)
        cls.cluster = Cluster(BINS, heartbeat_timeout_ms=3000, heartbeat_interval_ms=200)
        admin_file = os.path.join(cls.cluster.tmp.name, "admin-token")
        with open(admin_file, "w") as f:
            f.write(TOKENS["admin"])
        config = os.path.join(cls.cluster.tmp.name, "controller.yaml")
        with open(config, "w") as f:
            f.write("auth:\n  token_file: %s\n  users:\n" % admin_file)
            for name, role in (("alice", "user"), ("bob", "user"), ("vera", "viewer")):
                f.write("    - {name: %s, role: %s, token_sha256: %s}\n"
                        % (name, role, sha256(TOKENS[name])))
            f.write("  nodes:\n")
            for node in ("node-a", "node-b"):
                f.write("    - {node_id: %s, token_sha256: %s}\n" % (node, sha256(TOKENS[node])))
        cls.config = config
        cls.cluster.start_controller(extra_args=["--config", config])
        cls.cluster.start_worker("node-a", cpu_slots=2, env={"DHP_TOKEN": TOKENS["node-a"]},
                                 extra_args=["--rank-binary", RANK, "--data-root", cls.data.name,
                                             "--stop-grace-ms", "3000"])
        with cls.client("admin") as c:
            wait_for(lambda: [n for n in c.nodes() if n.state == node_pb2.NODE_STATE_READY],
                     timeout=20, what="node-a READY")

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        cls.data.cleanup()

    @classmethod
    def client(cls, who):
        return dhp_client.Client(cls.cluster.server, token=TOKENS[who], timeout=10)

    def rest(self, who, method, path, body=None):
        """(status, parsed JSON or text) of a REST call with `who`'s token."""
        headers = {"Authorization": "Bearer " + TOKENS[who]} if who else {}
        status, text = self.cluster.http(method, path, body, headers=headers)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def test_a_users_job_trains_with_rank_tokens_and_is_theirs(self):
        with self.client("alice") as c:
            job = c.submit(spec_text(self.cluster, "alice-tiny", steps=6, every=3))
            self.assertEqual(job.owner, "alice")
            final = c.wait(job.id, timeout=240)
            self.assertEqual(final.state, job_pb2.JOB_STATE_SUCCEEDED,
                             self.cluster.worker_log("node-a")[-3000:] + final.message)
            got = c.get(job.id)
            # The ranks reported progress and checkpoints: their tokens were accepted.
            self.assertEqual(got.runs[0].last_step, 6)
            self.assertTrue([k for k in got.checkpoints if k.step == 6])
            self.assertEqual([j.id for j in c.list()], [job.id])
        # bob sees none of alice's jobs and may not touch them; vera sees them all.
        status, body = self.rest("bob", "GET", "/v1/jobs")
        self.assertEqual((status, body.get("jobs", [])), (200, []))
        status, body = self.rest("bob", "GET", "/v1/jobs/" + job.id)
        self.assertEqual(status, 403, body)
        self.assertEqual(body["message"], "GetJob: user \"bob\" does not own job " + job.id)
        status, body = self.rest("bob", "POST", "/v1/jobs/%s:resume" % job.id, {})
        self.assertEqual(status, 403, body)
        status, body = self.rest("vera", "GET", "/v1/jobs?owner=alice")
        self.assertEqual([j["id"] for j in body["jobs"]], [job.id])
        # Rank tokens are not handed to anyone but the agent, and a made-up one is refused.
        status, body = self.rest("vera", "GET", "/v1/jobs/" + job.id)
        self.assertEqual(status, 200)
        self.assertNotIn("rank.", json.dumps(body))
        status, _ = self.cluster.http("POST", "/v1/kv:set", {
            "scope": {"job_id": job.id, "attempt": 1}, "key": "k", "value": ""},
            headers={"Authorization": "Bearer rank.%s.1.%s" % (job.id, "0" * 64)})
        self.assertEqual(status, 401)

    def test_a_node_acts_only_for_itself(self):
        # A heartbeat for node-a with node-b's token (it would mark node-a's ranks exited).
        status, body = self.rest("node-b", "POST", "/v1/nodes/node-a:heartbeat", {"ranks": []})
        self.assertEqual(status, 403, body)
        self.assertIn("may act only for its own node, not \"node-a\"", body["message"])
        # node-b registering as node-a (a fake node given node-a's queued ranks).
        status, body = self.rest("node-b", "POST", "/v1/nodes:register", {
            "node": {"id": "node-a", "hostname": "h", "resources": {"cpu_slots": 8}}})
        self.assertEqual(status, 403, body)
        # The same over gRPC, through grpcio.
        with self.client("node-b") as c:
            with self.assertRaises(dhp_client.PermissionDenied):
                c.submit(spec_text(self.cluster, "node-b-job"))
        # node-a is still READY and its node was not changed.
        with self.client("vera") as c:
            node = [n for n in c.nodes() if n.id == "node-a"][0]
            self.assertEqual(node.state, node_pb2.NODE_STATE_READY)
            self.assertEqual(node.resources.cpu_slots, 2)

    def test_rank_calls_need_a_rank_token_of_that_attempt(self):
        with self.client("bob") as c:
            queued = c.submit(spec_text(self.cluster, "bob-job", steps=6, every=3))
        try:
            scope = {"scope": {"job_id": queued.id, "attempt": 1}, "key": "x", "value": "eA=="}
            for who in ("node-a", "bob", "vera", "admin"):
                status, body = self.rest(who, "POST", "/v1/kv:set", scope)
                if who == "admin":
                    continue  # an admin may do anything
                self.assertEqual(status, 403, (who, body))
            fake = {"attempt": 1, "step": 99, "world_size": 2,
                    "path": "/tmp/x", "shard": {"rank": 0}}
            status, body = self.rest("node-a", "POST", "/v1/jobs/%s/checkpoints" % queued.id, fake)
            self.assertEqual(status, 403, body)
            status, body = self.rest("alice", "POST", "/v1/jobs/%s/checkpoints" % queued.id, fake)
            self.assertEqual(status, 403, body)
        finally:
            with self.client("bob") as c:
                c.cancel(queued.id)

    def test_ranks_keep_their_tokens_across_a_controller_restart(self):
        # The rank key is kept in the data directory: a restarted controller accepts the tokens
        # its predecessor handed out, so the run goes on in its first attempt.
        with self.client("bob") as c:
            job = c.submit(spec_text(self.cluster, "bob-restart", steps=100, every=25))
            wait_for(lambda: [r for r in c.get(job.id).ranks if r.step >= 3], timeout=120,
                     what="bob-restart training")
            self.assertNotEqual(c.get(job.id).job.state, job_pb2.JOB_STATE_SUCCEEDED)
        cluster = self.cluster
        cluster.kill_controller(signal.SIGKILL)
        cluster.start_controller(grpc_port=cluster.grpc_port, http_port=cluster.http_port,
                                 extra_args=["--config", self.config])
        with self.client("bob") as c:
            final = c.wait(job.id, timeout=240)
            self.assertEqual(final.state, job_pb2.JOB_STATE_SUCCEEDED,
                             cluster.worker_log("node-a")[-3000:] + final.message)
            got = c.get(job.id)
            self.assertEqual(got.job.current_attempt, 1, got.job.message)
            self.assertEqual(got.runs[0].last_step, 100)

    def test_roles(self):
        with open(self.cluster.config("tiny-cpu.yaml")) as f:
            spec = f.read()
        status, body = self.rest("vera", "POST", "/v1/jobs",
                                 {"spec_text": spec})
        self.assertEqual(status, 403, body)
        self.assertEqual(body["message"],
                         "SubmitJob: viewer \"vera\" may not submit jobs (roles user or admin may)")
        status, body = self.rest("alice", "POST", "/v1/jobs?dry_run=true",
                                 {"spec_text": spec,
                                  "owner": "bob"})
        self.assertEqual(status, 403, body)
        status, body = self.rest("admin", "POST", "/v1/jobs?dry_run=true",
                                 {"spec_text": spec,
                                  "owner": "bob"})
        self.assertEqual((status, body["job"]["owner"]), (200, "bob"), body)
        self.assertEqual(self.rest(None, "GET", "/v1/nodes")[0], 401)
        self.assertEqual(self.rest("vera", "GET", "/v1/nodes")[0], 200)
        self.assertEqual(self.cluster.http("GET", "/healthz")[0], 200)
        # dhpctl with a user's token: a viewer lists, may not cancel.
        code, out, err = self.cluster.dhpctl("list", env={"DHP_TOKEN": TOKENS["vera"]})
        self.assertEqual(code, 0, err)
        code, out, err = self.cluster.dhpctl("cancel", "j-nope", env={"DHP_TOKEN": TOKENS["vera"]})
        self.assertNotEqual(code, 0)
        self.assertIn("PERMISSION_DENIED", out + err)
        self.assertIn("CancelJob: viewer \"vera\" may not change jobs", out + err)

    def test_the_rank_key_is_private_to_the_controller(self):
        key = os.path.join(self.cluster.data_dir, "rank-token.key")
        mode = stat.S_IMODE(os.stat(key).st_mode)
        self.assertEqual(mode, 0o600)
        self.assertEqual(os.path.getsize(key), 32)

    def test_bad_credential_settings_are_refused_at_start(self):
        cluster = Cluster(BINS)
        try:
            config = os.path.join(cluster.tmp.name, "bad.yaml")
            with open(config, "w") as f:
                f.write("auth:\n  users:\n    - {name: eve, role: root, token_sha256: %s}\n"
                        % sha256("x"))
            with self.assertRaises(AssertionError) as e:
                cluster.start_controller(extra_args=["--config", config])
            self.assertIn("auth.users[0].role: one of admin, user, viewer", str(e.exception))
        finally:
            cluster.close()


if __name__ == "__main__":
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    BINS = Binaries(*sys.argv[1:5])
    RANK, GEN_SHAPES = sys.argv[5:7]
    unittest.main(argv=sys.argv[:1], verbosity=2)
