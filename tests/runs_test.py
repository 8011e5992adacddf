"""Jobs run end to end: a real dhp-controller, dhp-worker agents that launch real dhp-rank
processes (LibTorch, Gloo on loopback), the tiny model on a generated shapes dataset.

Usage: runs_test.py CONTROLLER WORKER DHPCTL CONFIGS_DIR RANK GEN_SHAPES [unittest args]."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

from dhp_cluster import Binaries, Cluster, wait_for

BINS = None
RANK = None
GEN_SHAPES = None
DATA_ROOT = None  # one generated dataset for every test

STEP_LINE = re.compile(r"(?m)^(?:\[rank \d+\] )?step (\d+)/(\d+) loss (\S+)")


def spec_text(cluster, name, steps=20, every=5, restarts=0, stall=600, keep=2, collective=None):
    with open(cluster.config("tiny-cpu.yaml")) as f:
        text = f.read()
    text = re.sub(r"(?m)^name: .*$", "name: " + name, text)
    text = re.sub(r"(?m)^  directory: .*$", "  directory: " + name, text)
    text = re.sub(r"(?m)^  max_steps: .*$", "  max_steps: %d" % steps, text)
    text = re.sub(r"(?m)^  warmup_steps: .*$", "  warmup_steps: 2", text)
    text = re.sub(r"(?m)^  every_steps: .*$", "  every_steps: %d" % every, text)
    text = re.sub(r"(?m)^  keep_latest: .*$", "  keep_latest: %d" % keep, text)
    text = re.sub(r"(?m)^  max_restarts: .*$",
                  "  max_restarts: %d\n  stall_timeout_s: %d" % (restarts, stall)
                  + ("\n  collective_timeout_s: %d" % collective if collective else ""), text)
    path = os.path.join(cluster.tmp.name, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def rank_pids(job, attempt=None, rank=None):
    """PIDs of live dhp-rank processes of a job (optionally one attempt / world rank)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % pid) as f:
                if f.read().split(") ")[1].startswith("Z"):
                    continue  # a zombie is gone already
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if not args or not args[0].endswith("dhp-rank") or job not in args:
            continue
        if attempt is not None and args[args.index("--attempt") + 1] != str(attempt):
            continue
        if rank is not None and args[args.index("--world-rank") + 1] != str(rank):
            continue
        pids.append(int(pid))
    return pids


def start_relay(cluster, *args):
    """A real dhp-relay for `cluster`'s controller (the one built beside BINS.worker), with
    its /metrics on: (the process, {"grpc_port": G, "metrics_port": M})."""
    binary = os.path.join(os.path.dirname(os.path.dirname(cluster.bins.worker)), "relay",
                          "dhp-relay")
    port_file = os.path.join(cluster.tmp.name, "relay-ports.json")
    log = cluster._log("relay.log")
    relay = subprocess.Popen([binary, "--controller", cluster.server, "--listen", "127.0.0.1:0",
                              "--port-file", port_file, "--metrics-listen", "127.0.0.1:0"]
                             + list(args), stdout=log, stderr=log)
    try:
        wait_for(lambda: os.path.exists(port_file), what="the relay's port file")
        with open(port_file) as f:
            return relay, json.load(f)
    except BaseException:
        relay.kill()
        relay.wait()
        raise


def relay_samples(port):
    """dhp-relay's /metrics as {series: value}."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("dhp_relay_"):
            series, value = line.rsplit(" ", 1)
            samples[series] = float(value)
    return samples


class ClusterJobs:
    """A controller on loopback (3 s heartbeat timeout) and the helpers the job tests share
    (runs, chaos, preemption): mix into a unittest.TestCase."""

    def setUp(self):
        self.cluster = Cluster(BINS, heartbeat_timeout_ms=3000, heartbeat_interval_ms=200)
        self.cluster.start_controller()

    def tearDown(self):
        self.cluster.close()

    def start_worker(self, node, slots=2, extra=()):
        self.cluster.start_worker(
            node, cpu_slots=slots,
            extra_args=["--rank-binary", RANK, "--data-root", DATA_ROOT, "--stop-grace-ms",
                        "3000"] + list(extra))
        wait_for(lambda: any(n["id"] == node and n.get("state") == "NODE_STATE_READY"
                             for n in self.cluster.dhpctl_json("nodes").get("nodes", [])),
                 timeout=20, what="node %s READY" % node)

    def submit(self, path):
        code, out, err = self.cluster.dhpctl("submit", "-f", path)
        self.assertEqual(code, 0, err + out)
        return re.search(r"job (j-[0-9a-f]{13}) submitted", out).group(1)

    def job(self, job):
        return self.cluster.dhpctl_json("get", job)

    def state(self, job):
        return self.job(job)["job"]["state"][len("JOB_STATE_"):]

    def wait_state(self, job, states, timeout=240):
        states = [states] if isinstance(states, str) else states
        try:
            return wait_for(lambda: self.state(job) in states and self.state(job),
                            timeout=timeout, interval=0.3, what="job %s in %s" % (job, states))
        except AssertionError:
            print(self.cluster.dhpctl("get", job)[1], file=sys.stderr)
            print(self.cluster.controller_log()[-4000:], file=sys.stderr)
            raise

    def wait_step(self, job, step, timeout=240):
        wait_for(lambda: int(self.job(job)["job"].get("latest_step", 0)) >= step,
                 timeout=timeout, interval=0.2, what="job %s at step %d" % (job, step))

    def losses(self, job, attempt=None, rank=0):
        """{step: loss text} from the rank's log, through dhpctl logs."""
        args = ["logs", job, "--rank", str(rank)] + (["--attempt", str(attempt)] if attempt else [])
        code, out, err = self.cluster.dhpctl(*args)
        self.assertEqual(code, 0, err)
        return {int(m.group(1)): m.group(3) for m in STEP_LINE.finditer(out)}

    def events(self, job):
        """The job's event history (dhpctl watch prints it and returns once the job is final)."""
        return self.cluster.dhpctl("watch", job, timeout=60)[1]

    def kv_has(self, job, keys, attempt=1):
        """Whether the controller's rendezvous KV holds all `keys` for the attempt (REST)."""
        code, body = self.cluster.http("POST", "/v1/kv:check", {
            "scope": {"jobId": job, "attempt": attempt}, "keys": keys})
        self.assertEqual(code, 200, body)
        return json.loads(body).get("ready", False)



class RunsTest(ClusterJobs, unittest.TestCase):
    # ---- the tests --------------------------------------------------------------------------

    def test_a_job_trains_to_success_with_falling_loss_and_a_checkpoint(self):
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "ok", steps=20, every=10))
        self.wait_state(job, "SUCCEEDED")
        got = self.job(job)
        self.assertEqual(int(got["job"]["latest_step"]), 20)
        run = got["runs"][0]
        self.assertEqual([p["node_id"] for p in run["placement"]], ["node-a", "node-a"])
        self.assertIn("queue_wait_seconds", run)
        ckpts = got["checkpoints"]
        self.assertEqual([int(c["step"]) for c in ckpts], [10, 20])
        for c in ckpts:
            self.assertEqual(c["state"], "CHECKPOINT_STATE_COMPLETE")
            self.assertEqual(len(c["shards"]), 2)
            for shard in c["shards"]:
                path = os.path.join(c["path"], shard["file"])
                self.assertEqual(os.path.getsize(path), int(shard["size_bytes"]))
            manifest = os.path.join(c["path"], "manifest.json")
            wait_for(lambda: os.path.exists(manifest), what=manifest)
            with open(manifest) as f:
                self.assertEqual(json.load(f)["shards"], c["shards"])
        wait_for(lambda: len(self.losses(job)) == 20, timeout=20, what="all 20 log lines")
        losses = self.losses(job)
        first = sum(float(losses[s]) for s in range(1, 6)) / 5
        last = sum(float(losses[s]) for s in range(16, 21)) / 5
        self.assertLess(last, first - 0.5, losses)
        code, out, _ = self.cluster.dhpctl("checkpoints", job)
        self.assertEqual(code, 0)
        self.assertRegex(out, r"(?m)^\S+ +20 +COMPLETE")
        self.assertEqual(rank_pids(job), [])

    def test_an_agent_on_a_heartbeat_stream_relays_its_ranks_to_success(self):
        """dhp-worker --heartbeat-stream: the ranks report to the agent's socket in its log
        directory, and every report and exit travels on the agent's one stream."""
        self.start_worker("node-a", extra=["--heartbeat-stream"])
        job = self.submit(spec_text(self.cluster, "streamed", steps=12, every=6))
        self.wait_state(job, "SUCCEEDED")
        got = self.job(job)
        self.assertEqual(int(got["job"]["latest_step"]), 12)
        self.assertEqual([int(c["step"]) for c in got["checkpoints"]], [6, 12])
        log = self.cluster.worker_log("node-a")
        self.assertIn("heartbeats on a WorkerService.HeartbeatStream (stream 1 ", log)
        self.assertNotIn("heartbeats are unary calls", log)
        socket = os.path.join(self.cluster.tmp.name, "agent-logs", "node-a", "progress.sock")
        self.assertIn("ranks report progress to unix:" + socket, log)
        self.cluster.stop_worker("node-a")  # SIGTERM: the agent removes its socket
        self.assertFalse(os.path.exists(socket))

    def api_calls(self, method):
        """dhp_api_requests_total of a gRPC method, summed over its status codes."""
        status, text = self.cluster.http("GET", "/metrics")
        self.assertEqual(status, 200)
        total = 0.0
        for line in text.splitlines():
            if (line.startswith("dhp_api_requests_total{") and 'method="%s"' % method in line
                    and 'transport="grpc"' in line):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def test_agents_behind_a_heartbeat_relay_train_and_outlive_the_relay(self):
        """dhp-relay forwards two agents' heartbeats as HeartbeatBatch calls (no unary Heartbeat
        reaches the controller) and counts them on its own /metrics; SIGKILLed mid-run, the
        agents heartbeat to the controller directly, and the job succeeds on its first attempt
        with no node lost."""
        relay, ports = start_relay(self.cluster, "--window-ms", "50", "--max-batch-bytes",
                                   "4194304", "--max-batch-elements", "65536")
        try:
            via = ["--heartbeat-relay", "127.0.0.1:%d" % ports["grpc_port"]]
            self.start_worker("node-a", extra=via)
            self.start_worker("node-b", extra=via)
            job = self.submit(spec_text(self.cluster, "relayed", steps=30, every=10))
            self.wait_step(job, 3)
            wait_for(lambda: self.api_calls("HeartbeatBatch") > 5, what="6 HeartbeatBatch calls")
            relayed = relay_samples(ports["metrics_port"])
            batches = self.api_calls("HeartbeatBatch")
            self.assertEqual(self.api_calls("Heartbeat"), 0)
            # The relay counts a batch once its answer is in: at least the 5 the controller had
            # answered before the scrape, at most what it answered after.
            self.assertGreaterEqual(relayed['dhp_relay_batches_total{code="OK"}'], 5)
            self.assertLessEqual(relayed['dhp_relay_batches_total{code="OK"}'], batches)
            self.assertGreaterEqual(relayed['dhp_relay_heartbeats_total{code="OK"}'],
                                    relayed['dhp_relay_batches_total{code="OK"}'])
            self.assertIn("dhp_relay_queued_heartbeats", relayed)
        finally:
            relay.kill()
            relay.wait()
        self.wait_state(job, "SUCCEEDED")
        self.assertGreater(self.api_calls("Heartbeat"), 5)
        got = self.job(job)
        self.assertEqual(int(got["job"]["latest_step"]), 30)
        self.assertEqual(len(got["runs"]), 1)
        for node in ("node-a", "node-b"):
            self.assertIn("heartbeats go to the controller %s directly" % self.cluster.server,
                          self.cluster.worker_log(node))
        nodes = {n["id"]: n for n in self.cluster.dhpctl_json("nodes")["nodes"]}
        for node in ("node-a", "node-b"):
            self.assertEqual(nodes[node]["state"], "NODE_STATE_READY")

    def test_a_relay_batch_limit_out_of_range_stops_the_relay_naming_it(self):
        binary = os.path.join(os.path.dirname(os.path.dirname(self.cluster.bins.worker)),
                              "relay", "dhp-relay")
        for flag, value, why in (("--max-batch-elements", "262145",
                                  "max_batch_elements: 262145 must be in 1..262144"),
                                 ("--max-batch-bytes", "0",
                                  "max_batch_bytes: 0 must be in 1..12582912"),
                                 # past int64: refused as typed, not read as INT64_MAX
                                 ("--max-batch-bytes", "99999999999999999999",
                                  "--max-batch-bytes: Value 99999999999999999999 is not a "
                                  "whole number")):
            run = subprocess.run([binary, "--controller", self.cluster.server, "--listen",
                                  "127.0.0.1:0", flag, value],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(run.returncode, 2, run.stderr)
            self.assertIn(why, run.stderr)

    def test_cancel_mid_run_leaves_no_rank_process(self):
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "cancel", steps=400, every=0))
        self.wait_step(job, 3)
        self.assertEqual(len(rank_pids(job)), 2)
        code, _, err = self.cluster.dhpctl("cancel", job)
        self.assertEqual(code, 0, err)
        self.wait_state(job, "CANCELLED", timeout=30)
        self.assertEqual(rank_pids(job), [])
        self.assertIn("every rank has stopped", self.events(job))

    def test_a_killed_rank_restarts_from_the_checkpoint_and_succeeds(self):
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "restart", steps=24, every=4, restarts=2))
        wait_for(lambda: any(c["state"] == "CHECKPOINT_STATE_COMPLETE"
                             for c in self.job(job).get("checkpoints", [])),
                 timeout=240, interval=0.2, what="a complete checkpoint")
        os.kill(rank_pids(job, attempt=1, rank=1)[0], signal.SIGKILL)
        self.wait_state(job, "SUCCEEDED")
        got = self.job(job)
        self.assertEqual(got["job"]["restart_count"], 1)
        self.assertEqual(got["runs"][0]["state"], "RUN_STATE_FAILED")
        self.assertIn("rank 1 on node node-a was killed by signal 9", got["runs"][0]["reason"])
        self.assertGreater(int(got["runs"][1]["start_step"]), 0)
        self.assertEqual(got["runs"][1]["state"], "RUN_STATE_SUCCEEDED")
        self.assertIn("restart 1 of 2 from checkpoint", self.events(job))

    def test_the_controller_killed_mid_run_comes_back_and_the_job_finishes(self):
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "crash", steps=30, every=10))
        self.wait_step(job, 3)
        self.cluster.kill_controller(signal.SIGKILL)
        time.sleep(1.0)
        self.cluster.start_controller(grpc_port=self.cluster.grpc_port,
                                      http_port=self.cluster.http_port)
        self.wait_state(job, "SUCCEEDED")
        got = self.job(job)
        self.assertEqual(got["job"].get("restart_count", 0), 0)
        self.assertEqual(len(got["runs"]), 1)
        self.assertEqual(int(got["job"]["latest_step"]), 30)

    def test_the_controller_killed_during_rendezvous_costs_no_attempt(self):
        """Issue 15 §5: rank 0 is held (SIGSTOP) before its first rendezvous call while rank 1
        announces itself in the world group and waits for it; the controller is killed (SIGKILL)
        and started again, then rank 0 goes on. Rank 1's key outlived the controller (it is kept
        in the store) and its wait was re-issued to the new one (the client retries UNAVAILABLE):
        the attempt bootstraps and the job succeeds, no restart spent. Before, the new controller
        had lost the key and rank 1 waited for itself until the attempt failed."""
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "rendezvous", steps=4, every=4))
        rank0 = wait_for(lambda: rank_pids(job, rank=0), timeout=60, interval=0.005,
                         what="rank 0 started")[0]
        os.kill(rank0, signal.SIGSTOP)
        try:
            self.assertFalse(self.kv_has(job, ["world/arrived/0"]), "rank 0 arrived before SIGSTOP")
            wait_for(lambda: self.kv_has(job, ["world/arrived/1"]), timeout=120, interval=0.1,
                     what="rank 1 waiting in the world group's rendezvous")
            time.sleep(0.5)  # rank 1 is in its wait for rank 0's key
            self.cluster.kill_controller(signal.SIGKILL)
            time.sleep(1.0)
            self.cluster.start_controller(grpc_port=self.cluster.grpc_port,
                                          http_port=self.cluster.http_port)
            self.assertTrue(self.kv_has(job, ["world/arrived/1"]), "rank 1's key was lost")
        finally:
            os.kill(rank0, signal.SIGCONT)
        self.wait_state(job, "SUCCEEDED")
        got = self.job(job)
        self.assertEqual(got["job"].get("restart_count", 0), 0)
        self.assertEqual(len(got["runs"]), 1)
        self.assertEqual(int(got["job"]["latest_step"]), 4)

    def reference_and_cancelled(self, name, steps, after):
        """Trains `name`-reference to the end and returns its {step: loss}, then a job `name`
        cancelled once it has a COMPLETE checkpoint at step >= `after` (its id)."""
        reference = self.submit(spec_text(self.cluster, name + "-reference", steps=steps, every=4))
        self.wait_state(reference, "SUCCEEDED")
        wait_for(lambda: len(self.losses(reference)) == steps, timeout=20, what="reference logs")
        job = self.submit(spec_text(self.cluster, name, steps=steps, every=4))
        wait_for(lambda: any(c["state"] == "CHECKPOINT_STATE_COMPLETE" and int(c["step"]) >= after
                             for c in self.job(job).get("checkpoints", [])),
                 timeout=240, interval=0.1, what="checkpoint at step %d" % after)
        self.assertEqual(self.cluster.dhpctl("cancel", job)[0], 0)
        self.wait_state(job, "CANCELLED", timeout=30)
        return self.losses(reference), job

    def resumed_losses(self, job, steps, after):
        """Waits for the resumed job to succeed; {step: loss} of attempt 2, which started at a
        checkpoint of step >= `after` and ran every step after it."""
        self.wait_state(job, "SUCCEEDED")
        start = int(self.job(job)["runs"][1]["start_step"])
        self.assertGreaterEqual(start, after)
        wait_for(lambda: len(self.losses(job, attempt=2)) == steps - start, timeout=20,
                 what="attempt 2 logs")
        resumed = self.losses(job, attempt=2)
        self.assertEqual(sorted(resumed), list(range(start + 1, steps + 1)))
        return resumed

    def test_resume_of_a_cancelled_job_continues_with_identical_losses(self):
        self.start_worker("node-a")
        expected, job = self.reference_and_cancelled("resumed", steps=16, after=8)
        code, out, err = self.cluster.dhpctl("resume", job)
        self.assertEqual(code, 0, err)
        for step, loss in self.resumed_losses(job, steps=16, after=8).items():
            self.assertEqual(loss, expected[step], "step %d" % step)  # bit-identical text

    def test_resume_on_another_layout_reshards_and_trains_on(self):
        """Issue 15 §2 end to end: a job of vision SP 2 x text TP 2 (two collocated ranks) is
        cancelled after a checkpoint and resumed as two data-parallel replicas of degree 1; the
        ranks reshard the checkpoint and train the remaining steps with the uninterrupted run's
        losses (fp32, summed in another order: 1e-5)."""
        self.start_worker("node-a")
        expected, job = self.reference_and_cancelled("relayout", steps=12, after=4)
        code, out, err = self.cluster.dhpctl("resume", job, "--vision-degree", "1",
                                             "--text-degree", "1", "--dp", "2")
        self.assertEqual(code, 0, err)
        self.assertIn("on layout vision 1 (sp) x text 1 x dp 2, collocated (was vision 2 (sp) x "
                      "text 2 x dp 1, collocated)", out)
        resumed = self.resumed_losses(job, steps=12, after=4)
        code, log, err = self.cluster.dhpctl("logs", job, "--attempt", "2", "--rank", "1")
        self.assertEqual(code, 0, err)
        self.assertIn("resharded checkpoint", log)
        self.assertIn("of layout vision 2 (sp) x text 2 x dp 1, collocated into vision 1 (sp) x "
                      "text 1 x dp 2, collocated", log)
        for step, loss in resumed.items():
            self.assertAlmostEqual(float(loss), float(expected[step]),
                                   delta=1e-5 * float(expected[step]), msg="step %d" % step)

    def test_an_elastic_job_shrinks_to_the_free_slots_and_grows_back_on_resume(self):
        """Issue 15 §2 elastic bounds end to end: dp 2 (4 ranks) with elastic dp 1..2 on a
        2-slot node runs as dp 1; cancelled after a checkpoint, a second node joins, and the
        resumed attempt takes dp 2 again, resharding the dp-1 checkpoint."""
        self.start_worker("node-a")
        path = spec_text(self.cluster, "elastic", steps=12, every=4)
        with open(path, "a") as f:
            f.write("elastic: {data_parallel_size: {min: 1}}\n")
        with open(path) as f:
            text = f.read().replace("data_parallel_size: 1 ", "data_parallel_size: 2 ", 1)
        with open(path, "w") as f:
            f.write(text)
        job = self.submit(path)
        wait_for(lambda: any(c["state"] == "CHECKPOINT_STATE_COMPLETE" and int(c["step"]) >= 4
                             for c in self.job(job).get("checkpoints", [])),
                 timeout=240, interval=0.1, what="checkpoint at step 4")
        got = self.job(job)
        self.assertEqual(int(got["job"]["spec"]["data_parallel_size"]), 1)
        self.assertEqual(int(got["runs"][0]["world_size"]), 2)
        code, out, err = self.cluster.dhpctl("events", job, "-o", "json")
        self.assertEqual(code, 0, err)
        placed = [e.get("reason", "") for e in map(json.loads, out.splitlines())
                  if "elastic" in e.get("reason", "")]
        self.assertTrue(any("on layout vision 2 (sp) x text 2 x dp 1, collocated (was vision 2 "
                            "(sp) x text 2 x dp 2, collocated)" in r for r in placed), placed)
        self.assertEqual(self.cluster.dhpctl("cancel", job)[0], 0)
        self.wait_state(job, "CANCELLED", timeout=30)
        self.start_worker("node-b")
        code, out, err = self.cluster.dhpctl("resume", job)
        self.assertEqual(code, 0, err)
        self.wait_state(job, "SUCCEEDED")
        got = self.job(job)
        self.assertEqual(int(got["job"]["spec"]["data_parallel_size"]), 2)
        self.assertEqual(int(got["runs"][1]["world_size"]), 4)
        self.assertGreaterEqual(int(got["runs"][1]["start_step"]), 4)
        code, log, err = self.cluster.dhpctl("logs", job, "--attempt", "2", "--rank", "3")
        self.assertEqual(code, 0, err)
        self.assertIn("of layout vision 2 (sp) x text 2 x dp 1, collocated into vision 2 (sp) x "
                      "text 2 x dp 2, collocated", log)

    def test_two_jobs_compete_and_the_second_waits_whole(self):
        self.start_worker("node-a", slots=3)  # room for one 2-rank job only
        first = self.submit(spec_text(self.cluster, "first", steps=12, every=0))
        second = self.submit(spec_text(self.cluster, "second", steps=4, every=0))
        self.wait_state(first, ["SCHEDULED", "STARTING", "RUNNING"])
        self.assertEqual(self.state(second), "QUEUED")
        self.assertIn("waiting", self.job(second)["job"]["message"])
        self.assertEqual(rank_pids(second), [])
        self.wait_state(second, "SUCCEEDED")
        self.assertEqual(self.state(first), "SUCCEEDED")
        self.assertGreater(float(self.job(second)["runs"][0]["queue_wait_seconds"]), 1.0)

    def test_a_job_larger_than_the_cluster_is_refused_at_submit(self):
        self.start_worker("node-a", slots=1)
        code, out, err = self.cluster.dhpctl("submit", "-f", spec_text(self.cluster, "big"))
        self.assertNotEqual(code, 0)
        self.assertIn("the job can never fit this cluster", err)
        self.assertEqual(self.cluster.dhpctl_json("list").get("jobs", []), [])

    def test_a_stalled_job_is_named_and_the_run_fails(self):
        # Every rank hangs (both held): no peer's collective times out, so the controller's
        # stall check finds it. (One held rank is found sooner by its peer's collective
        # timeout: test_a_hung_peer_fails_the_collective_within_the_collective_timeout.)
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "stall", steps=4000, every=0, stall=15))
        self.wait_step(job, 2)
        pids = rank_pids(job)
        self.assertEqual(len(pids), 2)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            self.wait_state(job, "FAILED", timeout=60)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        reason = self.job(job)["runs"][0]["reason"]
        self.assertIn("no progress for", reason)
        self.assertIn("rank 0 (node node-a) silent for", reason)
        self.assertIn("rank 1 (node node-a) silent for", reason)
        wait_for(lambda: rank_pids(job) == [], timeout=20, what="ranks gone")

    def test_a_hung_peer_fails_the_collective_within_the_collective_timeout(self):
        """Issue 15 §5: rank 1 is held (SIGSTOP) mid-training. Rank 0 waits for it in a
        collective and fails after restart.collective_timeout_s (4 s), naming the timeout, long
        before the stall timeout (600 s) would; before the field existed it waited the rank's
        default --timeout of 300 s."""
        self.start_worker("node-a")
        job = self.submit(spec_text(self.cluster, "hung-peer", steps=4000, every=0,
                                    collective=4))
        self.wait_step(job, 2)
        pid = rank_pids(job, rank=1)[0]
        os.kill(pid, signal.SIGSTOP)
        held = time.monotonic()
        try:
            self.wait_state(job, "FAILED", timeout=90)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.assertLess(time.monotonic() - held, 60)
        reason = self.job(job)["runs"][0]["reason"]
        self.assertIn("rank 0 on node node-a exited with code", reason)
        self.assertNotIn("no progress for", reason)
        # The agent ships logs on its own timer, apart from the heartbeat that reports the exit:
        # the rank's last line (the timeout) may arrive a round after the run failed.
        timed_out = lambda: re.search(r"(?i)tim(ed |e)out",
                                      self.cluster.dhpctl("logs", job, "--rank", "0")[1])
        wait_for(timed_out, timeout=30, interval=0.5, what="rank 0's log names the timeout")
        wait_for(lambda: rank_pids(job) == [], timeout=20, what="ranks gone")


def generate_dataset(root):
    out = os.path.join(root, "data", "shapes")
    subprocess.run([GEN_SHAPES, "--out", out, "--count", "64", "--size", "112", "--seed", "7"],
                   check=True, capture_output=True)


if __name__ == "__main__":
    BINS = Binaries(*sys.argv[1:5])
    RANK = os.path.abspath(sys.argv[5])
    GEN_SHAPES = os.path.abspath(sys.argv[6])
    import tempfile
    data_tmp = tempfile.TemporaryDirectory(prefix="dhp-runs-data-")
    DATA_ROOT = data_tmp.name
    generate_dataset(DATA_ROOT)
    unittest.main(argv=[sys.argv[0]] + sys.argv[7:])
