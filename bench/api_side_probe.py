#!/usr/bin/env python3
"""GetJob every 50 ms against whichever controller control_plane_bench runs, from a process of
its own: the API's latency as a client sees it when the load generator does not starve it.

control_plane_bench's own prober shares its process, and so its core, with the simulated agents
(and, with --relays, the relays). Run this one beside it at real-time priority on the same core,
standing in for a client on a machine of its own:

  chrt -f 50 taskset -c 0 .venv/bin/python bench/api_side_probe.py [--rest] [--submit] BENCH_LOG OUT STOP

It reads the newest "controller pid N on 127.0.0.1:PORT (REST on HTTP_PORT)" line of the bench's
log (following it from case to case), lists one job, then times GetJob of it with Python grpcio;
with --rest it alternates that with GET /v1/jobs/{id} on one kept-alive HTTP/1.1 connection
(http.client), so that both ways in are timed side by side by one client. With --submit, every
other gRPC call is a SubmitJob of that job's spec instead (the bench's 8-rank spec), from the
case's "ramp-up complete" line on, so that the probe's jobs do not take the nodes the case fills
(on a full cluster they queue). Each call is a line "unix_seconds latency_ms 1 port api" (api: grpc, rest or
submit; failures: "unix_seconds -1 0 port api WHAT") in OUT. It stops when STOP exists. The stubs come from proto/ (grpc_tools.protoc into a
temporary directory).

  bench/api_side_probe.py --windows BENCH_JSON OUT

prints, for each case of the bench's control_plane.json, the calls of OUT inside that case's
window (window_unix_us) by API: count, failures, p50 / p90 / p99 / max ms (nearest rank).
"""

import http.client
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTERVAL_S = 0.05


def load_stubs():
    out = tempfile.mkdtemp(prefix="dhp-probe-stubs-")
    proto = os.path.join(ROOT, "proto")
    files = [os.path.join("dhp/v1", f) for f in os.listdir(os.path.join(proto, "dhp/v1"))
             if f.endswith(".proto")]
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", proto, "--python_out=" + out,
                    "--grpc_python_out=" + out] + files, check=True, cwd=proto)
    sys.path.insert(0, out)
    from dhp.v1 import service_pb2, service_pb2_grpc  # noqa: E402 (generated above)
    return service_pb2, service_pb2_grpc


def newest_ports(log):
    """(grpc_port, http_port) of the newest controller in the bench's log, or (None, None)."""
    try:
        with open(log) as f:
            ports = re.findall(r"controller pid \d+ on 127\.0\.0\.1:(\d+) \(REST on (\d+)\)",
                               f.read())
    except OSError:
        return None, None
    return ports[-1] if ports else (None, None)


def ramped_up(log):
    """Whether the newest controller's case in the bench's log has finished its ramp-up."""
    try:
        with open(log) as f:
            text = f.read()
    except OSError:
        return False
    last = text.rfind("controller pid ")
    return last >= 0 and "ramp-up complete" in text[last:]


class Rest:
    """GET /v1/jobs/{id} on one kept-alive connection, reopened after a failure."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def get_job(self, job):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", int(self.port), timeout=5)
        try:
            self.conn.request("GET", "/v1/jobs/" + job)
            resp = self.conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        if resp.status != 200:
            raise RuntimeError("HTTP %d" % resp.status)


def nearest_rank(sorted_ms, q):
    return sorted_ms[min(len(sorted_ms) - 1, max(0, math.ceil(q * len(sorted_ms)) - 1))]


def windows(bench_json, out):
    """The probe's calls inside each case's window, as a table and as JSON lines."""
    with open(bench_json) as f:
        cases = json.load(f)["cases"]
    with open(out) as f:
        calls = [line.split() for line in f if line.strip()]
    print("| case | api | calls | failed | p50 / p90 / p99 / max ms |")
    print("|---|---|---:|---:|---:|")
    for case in cases:
        span = case.get("window", {}).get("window_unix_us")
        if not span:
            continue
        lo, hi = span[0] / 1e6, span[1] / 1e6
        for api in ("grpc", "rest", "submit"):
            mine = [c for c in calls if lo <= float(c[0]) <= hi and c[4] == api]
            ms = sorted(float(c[1]) for c in mine if c[2] == "1")
            if not mine:
                continue
            figures = [nearest_rank(ms, q) for q in (0.5, 0.9, 0.99)] + [ms[-1]] if ms else []
            label = "%s %s" % (case["controller"], case["case"])
            print("| %s | %s | %d | %d | %s |" % (label, api, len(mine), len(mine) - len(ms),
                                                  " / ".join("%.2f" % x for x in figures)))
            print("json " + json.dumps({"case": label, "api": api, "calls": len(mine),
                                        "failed": len(mine) - len(ms),
                                        "p50_p90_p99_max_ms": figures}))


def main():
    if sys.argv[1:2] == ["--windows"] and len(sys.argv) == 4:
        windows(sys.argv[2], sys.argv[3])
        return
    args = [a for a in sys.argv[1:] if a not in ("--rest", "--submit")]
    if len(args) != 3:
        sys.exit(__doc__)
    rest_too = "--rest" in sys.argv[1:]
    submit_too = "--submit" in sys.argv[1:]
    spec = None  # the probed job's, for --submit
    log, out, stop = args
    pb, rpc = load_stubs()
    port = stub = rest = job = None
    calls = 0
    with open(out, "w") as f:
        while not os.path.exists(stop):
            p, http_port = newest_ports(log)
            if p != port:
                port, job = p, None
                stub = rpc.JobServiceStub(grpc.insecure_channel("127.0.0.1:" + p)) if p else None
                rest = Rest(http_port) if p and rest_too else None
            if stub is None:
                time.sleep(0.5)
                continue
            api = "rest" if rest is not None and calls % 2 else "grpc"
            if api == "grpc" and submit_too and calls % 4 >= 2:
                api = "submit" if ramped_up(log) else "grpc"
            try:
                if job is None:  # the case's jobs come after its nodes: ask until there is one
                    jobs = stub.ListJobs(pb.ListJobsRequest(page_size=1), timeout=5).jobs
                    job = jobs[0].id if jobs else None
                    spec = jobs[0].spec if jobs else None
                    time.sleep(0.5)
                    continue
                calls += 1
                t0, p0 = time.time(), time.perf_counter()
                if api == "rest":
                    rest.get_job(job)
                elif api == "submit":
                    stub.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=5)
                else:
                    stub.GetJob(pb.GetJobRequest(job_id=job), timeout=5)
                f.write("%.6f %.3f 1 %s %s\n" % (t0, 1000 * (time.perf_counter() - p0), port, api))
            except grpc.RpcError as e:
                f.write("%.6f -1 0 %s %s %s\n" % (time.time(), port, api, e.code()))
                time.sleep(0.2)
            except (OSError, RuntimeError, http.client.HTTPException) as e:
                f.write("%.6f -1 0 %s %s %s\n" % (time.time(), port, api, type(e).__name__))
                time.sleep(0.2)
            f.flush()
            time.sleep(INTERVAL_S)


if __name__ == "__main__":
    main()
