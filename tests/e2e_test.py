"""End-to-end tests of the control plane: real dhp-controller, dhp-worker and dhpctl processes
on loopback. Usage: e2e_test.py CONTROLLER WORKER DHPCTL CONFIGS_DIR [unittest args]."""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import unittest

from dhp_cluster import Binaries, Cluster, wait_for

BINS = None


def single_rank(path):
    """Rewrites a tiny-cpu spec file to one rank (no parallelism) and returns its path."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"parallelism: (sequence|tensor)", "parallelism: none", text)
    text = text.replace("degree: 2", "degree: 1").replace("zero_stage: 1", "zero_stage: 0")
    with open(path, "w") as f:
        f.write(text)
    return path


def spec_with(cluster, name, labels=None, extra=""):
    """The tiny-cpu spec under another name (and labels), written to a file."""
    with open(cluster.config("tiny-cpu.yaml")) as f:
        text = f.read()
    text = re.sub(r"(?m)^name: .*$", "name: " + name, text)
    text = re.sub(r"(?m)^  directory: .*$", "  directory: " + name, text)
    if labels is not None:
        block = "labels:\n" + "".join("  %s: %s\n" % kv for kv in labels.items())
        text = re.sub(r"(?m)^labels:\n  purpose: demo\n", block, text)
    path = os.path.join(cluster.tmp.name, name + ".yaml")
    with open(path, "w") as f:
        f.write(text + extra)
    return path


class ControlPlaneTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(BINS, heartbeat_timeout_ms=1500, heartbeat_interval_ms=200)
        self.cluster.start_controller()

    def tearDown(self):
        self.cluster.close()

    def submit(self, path):
        code, out, err = self.cluster.dhpctl("submit", "-f", path)
        self.assertEqual(code, 0, err)
        match = re.match(r"job (j-[0-9a-f]{13}) submitted \((QUEUED|SCHEDULED)\)\n$", out)
        self.assertIsNotNone(match, out)
        return match.group(1)

    def test_demo_flow_submit_list_get_cancel_resume(self):
        c = self.cluster
        # No worker yet: the job stays QUEUED (runs_test.py covers jobs that run).
        job = self.submit(c.config("tiny-cpu.yaml"))

        code, out, _ = c.dhpctl("list")
        self.assertEqual(code, 0)
        self.assertRegex(out, r"(?m)^ID +NAME +STATE +ATTEMPT")
        self.assertRegex(out, r"(?m)^%s +tiny-cpu +QUEUED +1 " % job)

        got = c.dhpctl_json("get", job)
        self.assertEqual(got["job"]["state"], "JOB_STATE_QUEUED")
        self.assertEqual(got["job"]["spec"]["vision"]["degree"], 2)
        self.assertEqual(got["runs"][0]["state"], "RUN_STATE_PENDING")
        # REST returns the same message as gRPC.
        status, body = c.http("GET", "/v1/jobs/" + job)
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body), got)

        code, out, err = c.dhpctl("cancel", job, "--reason", "operator request")
        self.assertEqual((code, out), (0, "job %s CANCELLED\n" % job), err)
        code, out, err = c.dhpctl("cancel", job)
        self.assertEqual(code, 1)
        self.assertEqual(err, "dhpctl: FAILED_PRECONDITION: cannot cancel job %s: job is already "
                              "CANCELLED; there is nothing to cancel\n" % job)

        # A layout the tiny model cannot take is refused naming the field; a bad spelling is a
        # usage error; neither changes the job. A new dp is stored, and the message says so.
        code, out, err = c.dhpctl("resume", job, "--text-degree", "3")
        self.assertEqual((code, out), (1, ""), err)
        self.assertTrue(err.startswith("dhpctl: INVALID_ARGUMENT: resume: text_degree 3: "
                                       "text.degree: 3 does not divide the 4 attention heads"),
                        err)
        code, out, err = c.dhpctl("resume", job, "--placement", "collocated")
        self.assertEqual((code, err), (2, "dhpctl: --placement collocated: use one of "
                                          "collocate, separate (as a spec's placement)\n"))
        self.assertEqual(c.dhpctl_json("get", job)["job"]["current_attempt"], 1)
        code, out, err = c.dhpctl("resume", job, "--dp", "2")
        self.assertEqual(code, 0, err)
        self.assertIn("QUEUED as attempt 2", out)
        self.assertIn("on layout vision 2 (sp) x text 2 x dp 2, collocated (was vision 2 (sp) x "
                      "text 2 x dp 1, collocated), training.micro_batch_size 2 (was 4)", out)
        got = c.dhpctl_json("get", job)
        self.assertEqual(got["job"]["spec"]["data_parallel_size"], 2)
        self.assertEqual([r["state"] for r in got["runs"]],
                         ["RUN_STATE_CANCELLED", "RUN_STATE_PENDING"])
        self.assertEqual(got["runs"][0]["reason"], "operator request")

        code, out, _ = c.dhpctl("events")
        self.assertEqual(code, 0)
        transitions = [l.split("  ")[4] for l in out.splitlines() if " job.state " in l]
        self.assertEqual(transitions, ["QUEUED", "QUEUED -> CANCELLED", "CANCELLED -> QUEUED"])
        # `dhpctl events JOB`: that job's events only (the alert texts name it).
        other = self.submit(spec_with(c, "other-job"))
        code, out, _ = c.dhpctl("-o", "json", "events", job)
        self.assertEqual(code, 0)
        ids = {json.loads(l).get("job_id") for l in out.splitlines()}
        self.assertEqual(ids, {job})
        self.assertIn(other, c.dhpctl("events")[1])

        # A node too small for the job's tensor-parallel pair: the job keeps waiting, and says so.
        c.start_worker("node-a", cpu_slots=1)
        nodes = wait_for(lambda: [n for n in c.dhpctl_json("nodes").get("nodes", [])
                                  if n.get("state") == "NODE_STATE_READY"], what="READY node")
        self.assertEqual(nodes[0]["id"], "node-a")
        self.assertEqual(nodes[0]["resources"]["cpu_slots"], 1)
        got = wait_for(lambda: "cannot run on this cluster" in
                       c.dhpctl_json("get", job)["job"]["message"] and c.dhpctl_json("get", job),
                       what="the scheduler's verdict")
        self.assertEqual(got["job"]["state"], "JOB_STATE_QUEUED")

    def test_bad_spec_is_refused_with_the_field_and_nothing_is_stored(self):
        c = self.cluster
        job = self.submit(c.config("tiny-cpu.yaml"))
        bad = spec_with(c, "bad-degree")
        with open(bad) as f:
            text = f.read().replace("  degree: 2\n  zero_stage", "  degree: 3\n  zero_stage")
        with open(bad, "w") as f:
            f.write(text)
        code, out, err = c.dhpctl("submit", "-f", bad)
        self.assertEqual(code, 1)
        self.assertEqual(out, "")
        self.assertEqual(err.count("\n"), 1, err)
        self.assertIn("INVALID_ARGUMENT: vision.degree: 3 does not divide the 4 attention heads",
                      err)

        typo = spec_with(c, "typo", extra="\ntrainig:\n  max_steps: 3\n")
        code, _, err = c.dhpctl("submit", "-f", typo)
        self.assertEqual(code, 1)
        self.assertIn("trainig: unknown key", err)

        status, body = c.http("POST", "/v1/jobs", {"spec": {"name": "x", "vision": {"degre": 2}}})
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["status"], "INVALID_ARGUMENT")
        self.assertIn("spec.vision.degre: unknown key", json.loads(body)["message"])

        status, _ = c.http("POST", "/v1/jobs", "name: y\n", content_type="application/yaml")
        self.assertEqual(status, 400)

        # Bytes that are not UTF-8: dhpctl names the byte (gRPC could not send them).
        raw = spec_with(c, "raw-bytes")
        with open(raw, "ab") as f:
            f.write(b"labels: {owner: \"a\xffb\"}\n")
        code, out, err = c.dhpctl("submit", "-f", raw)
        self.assertEqual(code, 2, err)
        self.assertIn("not valid UTF-8: byte 0xFF at line", err)
        jobs = c.dhpctl_json("list").get("jobs", [])
        self.assertEqual([j["id"] for j in jobs], [job])
        self.assertEqual(c.dhpctl_json("get", job)["job"]["state"], "JOB_STATE_QUEUED")

    def test_sigkill_restart_keeps_jobs_runs_nodes_and_events(self):
        c = self.cluster
        jobs = [self.submit(spec_with(c, "job-%d" % i)) for i in range(3)]
        c.dhpctl("cancel", jobs[0])
        c.dhpctl("resume", jobs[0])
        c.dhpctl("cancel", jobs[1])
        c.start_worker("node-a", cpu_slots=1)  # too small: the jobs stay QUEUED
        wait_for(lambda: c.dhpctl_json("nodes").get("nodes"), what="registration")
        wait_for(lambda: "cannot run on this cluster" in
                 c.dhpctl_json("get", jobs[2])["job"]["message"], what="the scheduler's verdict")
        before = {j: c.dhpctl_json("get", j) for j in jobs}
        listed = c.dhpctl_json("list")
        _, events_before, _ = c.dhpctl("-o", "json", "events")

        self.assertEqual(c.kill_controller(signal.SIGKILL), -signal.SIGKILL)
        c.start_controller(grpc_port=c.grpc_port)  # the worker reconnects to the same port

        self.assertEqual({j: c.dhpctl_json("get", j) for j in jobs}, before)
        self.assertEqual(c.dhpctl_json("list"), listed)
        _, events_after, _ = c.dhpctl("-o", "json", "events")
        self.assertEqual(events_after, events_before)
        node = wait_for(lambda: c.dhpctl_json("nodes").get("nodes"), what="node after restart")
        self.assertEqual(node[0]["id"], "node-a")
        self.assertEqual(node[0]["state"], "NODE_STATE_READY")
        # New work continues with fresh ids and increasing event ids (refused: it cannot fit).
        code, _, err = c.dhpctl("submit", "-f", spec_with(c, "after-restart"))
        self.assertEqual(code, 1)
        self.assertIn("FAILED_PRECONDITION: the job can never fit this cluster: needs 2", err)
        self.submit(single_rank(spec_with(c, "after-restart-small")))
        last = json.loads(c.dhpctl("-o", "json", "events")[1].splitlines()[-1])
        self.assertGreater(int(last["id"]), len(events_before.splitlines()))

    def test_a_second_controller_on_the_same_data_directory_is_refused(self):
        c = self.cluster
        job = self.submit(spec_with(c, "locked"))
        second = subprocess.run(
            [c.bins.controller, "--data-dir", c.data_dir, "--grpc-port", "0",
             "--http-port", "0"], capture_output=True, text=True, timeout=30)
        self.assertEqual(second.returncode, 1, second.stderr)
        self.assertIn("dhp-controller.lock is locked by another process (pid %d)"
                      % c.controller.pid, second.stderr)
        self.assertEqual(c.dhpctl_json("get", job)["job"]["id"], job)  # the first serves on
        # kill -9 releases the lock (the kernel drops it): a restart takes the directory.
        c.kill_controller(signal.SIGKILL)
        c.start_controller()
        self.assertEqual(c.dhpctl_json("get", job)["job"]["id"], job)

    def test_unreadable_rows_are_quarantined_and_restarts_work(self):
        """The issue's poison rows, as an older build stored them: a node hostname, a cancel
        reason and a label value holding a \\xff byte. They crashed the controller within 3 s
        (exit 134 on every restart) or failed every listing with DATA_LOSS."""
        c = self.cluster
        kept = self.submit(spec_with(c, "kept"))
        labelled = self.submit(spec_with(c, "labelled", labels={"owner": "abcd"}))
        cancelled = self.submit(spec_with(c, "cancelled"))
        self.assertEqual(c.dhpctl("cancel", cancelled, "--reason", "xzy")[0], 0)
        status, _ = c.http("POST", "/v1/nodes:register",
                           {"node": {"id": "node-p", "hostname": "hzost",
                                     "resources": {"cpu_slots": 1}}})
        self.assertEqual(status, 200)
        self.assertEqual(c.kill_controller(signal.SIGTERM), 0)

        db = sqlite3.connect(os.path.join(c.data_dir, "dhp.db"))
        def poison(sql, key, good, bad):  # same length: the protobuf lengths stay right
            (blob,) = db.execute(sql, (key,)).fetchone()
            self.assertIn(good, blob)
            table = sql.split(" FROM ")[1].split()[0]
            column = sql.split(" FROM ")[1].split()[2]
            db.execute("UPDATE %s SET proto = ? WHERE %s = ?" % (table, column),
                       (blob.replace(good, bad), key))
        poison("SELECT proto FROM nodes WHERE id = ?", "node-p", b"hzost", b"h\xffost")
        poison("SELECT proto FROM jobs WHERE id = ?", labelled, b"abcd", b"ab\xffd")
        (event_id,) = db.execute("SELECT id FROM events WHERE reason = 'xzy' AND type = "
                                 "'job.state'").fetchone()
        poison("SELECT proto FROM events WHERE id = ?", event_id, b"xzy", b"x\xffy")
        db.commit()
        db.close()

        c.start_controller()
        time.sleep(3.5)  # the heartbeat check lists the nodes every 200 ms
        self.assertIsNone(c.controller.poll(), c.controller_log())
        ids = [j["id"] for j in c.dhpctl_json("list").get("jobs", [])]
        self.assertEqual(ids, [cancelled, kept])
        code, _, err = c.dhpctl("get", labelled)
        self.assertEqual(code, 1)
        self.assertIn("its stored record could not be read", err)
        self.assertEqual(c.dhpctl_json("nodes").get("nodes", []), [])
        status, body = c.http("GET", "/v1/events")
        self.assertEqual(status, 200)
        events = [json.loads(line) for line in body.splitlines()]
        quarantined = [e["reason"] for e in events if e["type"] == "store.quarantine"]
        self.assertEqual(len(quarantined), 3, quarantined)
        self.assertTrue(any(r.startswith("nodes row node-p could not be read (the stored ") and
                            "hostname: not valid UTF-8: byte 0xFF" in r for r in quarantined),
                        quarantined)
        self.assertTrue(any("spec.labels.owner: not valid UTF-8: byte 0xFF" in r
                            for r in quarantined), quarantined)
        status, text = c.http("GET", "/metrics")
        for table in ("jobs", "nodes", "events"):
            self.assertIn('dhp_store_quarantined_rows_total{table="%s"} 1\n' % table, text)
        self.assertIn("moved it to the quarantine table", c.controller_log())

        self.assertEqual(c.kill_controller(signal.SIGTERM), 0)
        c.start_controller()
        self.assertEqual([j["id"] for j in c.dhpctl_json("list").get("jobs", [])],
                         [cancelled, kept])
        status, text = c.http("GET", "/metrics")
        self.assertIn('dhp_store_quarantined_rows_total{table="jobs"} 0\n', text)
        self.assertIn('dhp_store_quarantine_rows{table="jobs"} 1\n', text)
        self.assertIn('dhp_store_quarantine_rows{table="runs"} 1\n', text)  # the job's run
        self.assertEqual(c.http("GET", "/v1/events")[0], 200)

    def test_silent_worker_is_marked_lost_and_comes_back(self):
        c = self.cluster
        c.start_worker("node-b")
        wait_for(lambda: c.dhpctl_json("nodes").get("nodes"), what="registration")
        c.workers["node-b"].send_signal(signal.SIGSTOP)  # alive but silent
        try:
            wait_for(lambda: "LOST" in c.dhpctl("nodes")[1], timeout=10, what="LOST")
            code, out, _ = c.dhpctl("nodes")
            self.assertRegex(out, r"(?m)^node-b +LOST +0 +2 ")
        finally:
            c.workers["node-b"].send_signal(signal.SIGCONT)
        wait_for(lambda: re.search(r"(?m)^node-b +READY", c.dhpctl("nodes")[1]), timeout=10,
                 what="READY again")
        _, out, _ = c.dhpctl("events")
        self.assertRegex(out, r"node node-b  node.state  READY -> LOST  \(no heartbeat for [\d.]+ s \(timeout 1.5 s\)\)")
        self.assertIn("node node-b  node.state  LOST -> READY  (heartbeat resumed)", out)

    def test_metrics_pass_promtool_and_count_requests(self):
        c = self.cluster
        self.submit(c.config("tiny-cpu.yaml"))
        c.start_worker("node-m", cpu_slots=1)  # too small for the job: it stays QUEUED
        c.dhpctl("list")
        c.http("GET", "/v1/jobs")
        # Answered by the gateway itself, counted all the same:
        self.assertEqual(c.http("GET", "/v1/jobs?colour=red")[0], 400)
        self.assertEqual(c.http("GET", "/v1/nope")[0], 404)
        self.assertEqual(c.http("POST", "/v1/jobs", "x: 1", "text/plain")[0], 415)
        wait_for(lambda: c.dhpctl_json("nodes").get("nodes"), what="registration")
        status, text = c.http("GET", "/metrics")
        # prometheus-cpp renders the labels of a family sorted by name.
        for labels in ('code="INVALID_ARGUMENT",method="ListJobs"',
                       'code="NOT_FOUND",method="Unknown"',
                       'code="INVALID_ARGUMENT",method="SubmitJob"'):
            self.assertIn('dhp_api_requests_total{%s,transport="rest"} 1\n' % labels, text)
        self.assertEqual(status, 200)
        self.assertIn('dhp_jobs{state="QUEUED"} 1\n', text)
        self.assertIn('dhp_nodes{state="READY"} 1\n', text)
        self.assertIn('dhp_api_requests_total{code="OK",method="SubmitJob",transport="grpc"} 1\n',
                      text)
        self.assertIn('dhp_api_requests_total{code="OK",method="ListJobs",transport="rest"} 1\n',
                      text)
        self.assertIn('dhp_api_request_duration_seconds_count{code="OK",method="SubmitJob",transport="grpc"}'
                      ' 1\n', text)
        check = subprocess.run(["promtool", "check", "metrics"], input=text,
                               capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)

    def test_watch_follows_until_the_job_is_final(self):
        c = self.cluster
        job = self.submit(c.config("tiny-cpu.yaml"))
        watch = subprocess.Popen([BINS.dhpctl, "--server", c.server, "watch", job],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        self.assertIsNone(watch.poll(), "watch must keep following a live job")
        c.dhpctl("cancel", job)
        out, err = watch.communicate(timeout=10)
        self.assertEqual(watch.returncode, 5)  # ended CANCELLED
        self.assertIn("job.state  QUEUED -> CANCELLED  (cancelled by user)", out)
        self.assertIn("ended CANCELLED", err)

    def test_list_filters_and_limits(self):
        c = self.cluster
        a = self.submit(spec_with(c, "team-a-1", labels={"team": "a"}))
        b = self.submit(spec_with(c, "team-b-1", labels={"team": "b"}))
        a2 = self.submit(spec_with(c, "team-a-2", labels={"team": "a"}))
        c.dhpctl("cancel", a)
        ids = lambda *args: [j["id"] for j in c.dhpctl_json("list", *args).get("jobs", [])]
        self.assertEqual(ids("--label", "team=a"), [a2, a])
        self.assertEqual(ids("--state", "cancelled"), [a])
        self.assertEqual(ids("--state", "queued", "--label", "team=b"), [b])
        self.assertEqual(ids("--limit", "2"), [a2, b])
        code, _, err = c.dhpctl("list", "--state", "sleeping")
        self.assertEqual(code, 2)
        self.assertIn("--state sleeping is not a job state", err)
        status, body = c.http("GET", "/v1/jobs?page_size=abc")
        self.assertEqual(status, 400)
        self.assertIn("page_size", json.loads(body)["message"])

    def test_listens_on_loopback_only_by_default(self):
        c = self.cluster
        loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
        listening = {}
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for line in f.readlines()[1:]:
                    local, state = line.split()[1], line.split()[3]
                    if state == "0A":  # LISTEN
                        addr, port = local.split(":")
                        listening.setdefault(int(port, 16), set()).add(addr)
        for port in (c.grpc_port, c.http_port):
            self.assertIn(port, listening)
            self.assertTrue(listening[port] <= loopback,
                            "port %d listens on %s" % (port, listening[port]))

    def test_unreachable_controller_is_a_clear_error(self):
        proc = subprocess.run([BINS.dhpctl, "--server", "127.0.0.1:1", "--timeout-ms", "2000",
                               "list"], capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 3)
        self.assertTrue(proc.stderr.startswith(
            "dhpctl: cannot reach the controller at 127.0.0.1:1 (is dhp-controller running?"),
            proc.stderr)
        self.assertEqual(proc.stderr.count("\n"), 1)

    def test_missing_spec_file_is_a_usage_error(self):
        code, _, err = self.cluster.dhpctl("submit", "-f", "/nonexistent.yaml")
        self.assertEqual(code, 2)
        self.assertEqual(err, "dhpctl: cannot read spec file /nonexistent.yaml\n")


class AuthTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(BINS)
        self.token_file = os.path.join(self.cluster.tmp.name, "token")
        with open(self.token_file, "w") as f:
            f.write("tok-123\n")
        self.cluster.start_controller(extra_args=["--auth-token-file", self.token_file])

    def tearDown(self):
        self.cluster.close()

    def test_token_is_required_on_grpc_and_rest_but_not_for_probes(self):
        c = self.cluster
        code, _, err = c.dhpctl("list")
        self.assertEqual(code, 1)
        self.assertEqual(err, "dhpctl: UNAUTHENTICATED: missing credentials: send 'authorization: "
                              "Bearer <token>' (dhpctl: --token-file or DHP_TOKEN)\n")
        code, _, err = c.dhpctl("list", env={"DHP_TOKEN": "wrong"})
        self.assertEqual(err, "dhpctl: UNAUTHENTICATED: invalid credentials: the token is wrong\n")
        code, out, err = c.dhpctl("--token-file", self.token_file, "submit", "-f",
                                  c.config("tiny-cpu.yaml"))
        self.assertEqual(code, 0, err)
        code, out, _ = c.dhpctl("list", env={"DHP_TOKEN": "tok-123"})
        self.assertIn("tiny-cpu", out)

        status, body = c.http("GET", "/v1/jobs")
        self.assertEqual(status, 401)
        self.assertEqual(json.loads(body)["status"], "UNAUTHENTICATED")
        status, body = c.http("GET", "/v1/jobs", headers={"Authorization": "Bearer tok-123"})
        self.assertEqual(status, 200)
        self.assertEqual(len(json.loads(body)["jobs"]), 1)
        self.assertEqual(c.http("GET", "/healthz")[0], 200)
        self.assertEqual(c.http("GET", "/metrics")[0], 200)

        c.start_worker("node-t", env={"DHP_TOKEN": "tok-123"})
        nodes = wait_for(lambda: c.dhpctl_json("--token-file", self.token_file, "nodes")
                         .get("nodes"), what="authenticated registration")
        self.assertEqual(nodes[0]["id"], "node-t")


if __name__ == "__main__":
    BINS = Binaries(*sys.argv[1:5])
    unittest.main(argv=[sys.argv[0]] + sys.argv[5:], verbosity=2)
