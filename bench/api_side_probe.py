#!/usr/bin/env python3
"""GetJob every 50 ms against whichever controller control_plane_bench runs, from a process of
its own: the API's latency as a client sees it when the load generator does not starve it.

control_plane_bench's own prober shares its process, and so its core, with the simulated agents
(and, with --relays, the relays). Run this one beside it at real-time priority on the same core,
standing in for a client on a machine of its own:

  chrt -f 50 taskset -c 0 .venv/bin/python bench/api_side_probe.py BENCH_LOG OUT STOP_FILE

It reads the newest "controller pid N on 127.0.0.1:PORT" line of the bench's log (following it
from case to case), lists one job, then times GetJob of it with Python grpcio; each call is a
line "unix_seconds latency_ms 1 port" (failures: "unix_seconds -1 0 port CODE") in OUT. It stops
when STOP_FILE exists. The stubs come from proto/ (grpc_tools.protoc into a temporary directory).
Cut OUT to a case's window with the case's window_unix_us from the bench's JSON.
"""

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


def newest_port(log):
    try:
        with open(log) as f:
            ports = re.findall(r"controller pid \d+ on 127\.0\.0\.1:(\d+)", f.read())
    except OSError:
        return None
    return ports[-1] if ports else None


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    log, out, stop = sys.argv[1:]
    pb, rpc = load_stubs()
    port = stub = job = None
    with open(out, "w") as f:
        while not os.path.exists(stop):
            p = newest_port(log)
            if p != port:
                port, job = p, None
                stub = rpc.JobServiceStub(grpc.insecure_channel("127.0.0.1:" + p)) if p else None
            if stub is None:
                time.sleep(0.5)
                continue
            try:
                if job is None:  # the case's jobs come after its nodes: ask until there is one
                    jobs = stub.ListJobs(pb.ListJobsRequest(page_size=1), timeout=5).jobs
                    job = jobs[0].id if jobs else None
                    time.sleep(0.5)
                    continue
                t0, p0 = time.time(), time.perf_counter()
                stub.GetJob(pb.GetJobRequest(job_id=job), timeout=5)
                f.write("%.6f %.3f 1 %s\n" % (t0, 1000 * (time.perf_counter() - p0), port))
            except grpc.RpcError as e:
                f.write("%.6f -1 0 %s %s\n" % (time.time(), port, e.code()))
                time.sleep(0.2)
            f.flush()
            time.sleep(INTERVAL_S)


if __name__ == "__main__":
    main()
