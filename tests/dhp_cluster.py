"""Starts real dhp processes on loopback for end-to-end tests.

A Cluster owns a temporary data directory, one dhp-controller (ports chosen by the kernel and
read back from its --port-file) and any number of dhp-worker agents, and runs dhpctl against
them. Everything is a real process talking over real sockets.
"""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


class Binaries:
    """Paths of the binaries under test, from the command line (Bazel passes $(rootpath))."""

    def __init__(self, controller, worker, dhpctl, configs_dir):
        self.controller = os.path.abspath(controller)
        self.worker = os.path.abspath(worker)
        self.dhpctl = os.path.abspath(dhpctl)
        self.configs_dir = os.path.abspath(configs_dir)


def wait_for(predicate, timeout=10.0, interval=0.05, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))


class Cluster:
    def __init__(self, bins, heartbeat_timeout_ms=10000, heartbeat_interval_ms=200):
        self.bins = bins
        self.tmp = tempfile.TemporaryDirectory(prefix="dhp-e2e-")
        self.data_dir = os.path.join(self.tmp.name, "data")
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.controller = None
        self.workers = {}
        self.grpc_port = 0
        self.http_port = 0
        self.logs = []

    # ---- processes ------------------------------------------------------------------------

    def _log(self, name):
        f = open(os.path.join(self.tmp.name, name), "ab")
        self.logs.append(f)
        return f

    def start_controller(self, grpc_port=0, http_port=0, extra_args=()):
        port_file = os.path.join(self.tmp.name, "ports.json")
        if os.path.exists(port_file):
            os.remove(port_file)
        log = self._log("controller.log")
        self.controller = subprocess.Popen(
            [self.bins.controller, "--data-dir", self.data_dir,
             "--grpc-port", str(grpc_port), "--http-port", str(http_port),
             "--port-file", port_file,
             "--heartbeat-timeout-ms", str(self.heartbeat_timeout_ms),
             "--heartbeat-interval-ms", str(self.heartbeat_interval_ms)] + list(extra_args),
            stdout=log, stderr=log)
        wait_for(lambda: os.path.exists(port_file) or self.controller.poll() is not None,
                 what="the controller's port file")
        if self.controller.poll() is not None:
            raise AssertionError("dhp-controller exited: " + self.controller_log())
        with open(port_file) as f:
            ports = json.load(f)
        self.grpc_port, self.http_port = ports["grpc_port"], ports["http_port"]
        return self.controller

    def kill_controller(self, sig=signal.SIGKILL):
        self.controller.send_signal(sig)
        self.controller.wait(timeout=10)
        return self.controller.returncode

    def start_worker(self, node_id, cpu_slots=2, env=None, extra_args=()):
        log = self._log("worker-%s.log" % node_id)
        proc = subprocess.Popen(
            [self.bins.worker, "--server", self.server, "--node-id", node_id,
             "--cpu-slots", str(cpu_slots),
             "--log-dir", os.path.join(self.tmp.name, "agent-logs", node_id)] + list(extra_args),
            stdout=log, stderr=log, env=dict(os.environ, **(env or {})))
        self.workers[node_id] = proc
        return proc

    def stop_worker(self, node_id):
        proc = self.workers.pop(node_id)
        proc.terminate()
        proc.wait(timeout=10)

    def close(self):
        for proc in list(self.workers.values()):
            proc.kill()
            proc.wait()
        if self.controller is not None and self.controller.poll() is None:
            self.controller.terminate()
            try:
                self.controller.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.controller.kill()
        for f in self.logs:
            f.close()
        self.tmp.cleanup()

    def worker_log(self, node_id):
        with open(os.path.join(self.tmp.name, "worker-%s.log" % node_id), "rb") as f:
            return f.read().decode(errors="replace")

    def controller_log(self):
        with open(os.path.join(self.tmp.name, "controller.log"), "rb") as f:
            return f.read().decode(errors="replace")

    # ---- clients --------------------------------------------------------------------------

    @property
    def server(self):
        return "127.0.0.1:%d" % self.grpc_port

    def dhpctl(self, *args, input_text=None, timeout=30, env=None):
        """Runs dhpctl; returns (exit code, stdout, stderr)."""
        proc = subprocess.run([self.bins.dhpctl, "--server", self.server] + list(args),
                              input=input_text, capture_output=True, text=True,
                              timeout=timeout, env=dict(os.environ, **(env or {})))
        return proc.returncode, proc.stdout, proc.stderr

    def dhpctl_json(self, *args):
        code, out, err = self.dhpctl("-o", "json", *args)
        if code != 0:
            raise AssertionError("dhpctl %s failed (%d): %s" % (" ".join(args), code, err))
        return json.loads(out)

    def run_job(self, spec_path, timeout=300):
        """Submits the spec with dhpctl and waits until the job is final; returns (job id, final
        state, `dhpctl get` JSON)."""
        code, out, err = self.dhpctl("submit", "-f", spec_path)
        if code != 0:
            raise AssertionError("dhpctl submit failed (%d): %s" % (code, err + out))
        job = re.search(r"job (j-[0-9a-f]+) submitted", out).group(1)
        final = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")
        state = wait_for(lambda: (lambda s: s in final and s)(
            self.dhpctl_json("get", job)["job"]["state"]),
            timeout=timeout, interval=0.3, what="job %s to end" % job)
        return job, state, self.dhpctl_json("get", job)

    def http(self, method, path, body=None, content_type="application/json", headers=None):
        """Returns (status, body text)."""
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.http_port, path),
                                     data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def config(self, name):
        return os.path.join(self.bins.configs_dir, name)
