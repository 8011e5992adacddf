"""TLS on both of the controller's ports, with certificates openssl makes for this test.

A dhp-controller serving gRPC and REST over TLS (token auth on, client certificates verified
when presented), a dhp-worker agent whose ranks reach it over TLS with a client certificate,
and clients we did not write: Python's ssl/urllib for REST, grpcio (through dhp_client) for
gRPC, plus dhpctl. Then a controller that requires client certificates, and the configuration
errors a wrong TLS setup gives.

Usage (tools/test.sh, with dhp_client installed into .venv):
  .venv/bin/python tests/tls_test.py CONTROLLER WORKER DHPCTL CONFIGS RANK GEN_SHAPES
"""

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dhp_cluster import Binaries, Cluster, wait_for  # noqa: E402
from runs_test import spec_text  # noqa: E402

import dhp_client  # noqa: E402
from dhp_client.pb import job_pb2, node_pb2  # noqa: E402

BINS = RANK = GEN_SHAPES = None
TOKEN = "tls-test-token"


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_certificates(d):
    """CA, a server certificate for 127.0.0.1/localhost, a client certificate, and a client
    certificate from another CA; all PEM files in directory d."""
    for ca in ("ca", "rogue-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-subj", "/CN=dhp test %s" % ca, "-keyout", ca + ".key", "-out", ca + ".pem",
                cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for name, ca, ext in (("server", "ca", "server.ext"), ("client", "ca", "client.ext"),
                          ("rogue", "rogue-ca", "client.ext")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=dhp test " + name,
                "-keyout", name + ".key", "-out", name + ".csr", cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", name + ".pem", cwd=d)


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = tempfile.TemporaryDirectory(prefix="dhp-tls-certs-")
        make_certificates(cls.certs.name)
        cls.token_file = os.path.join(cls.certs.name, "token")
        with open(cls.token_file, "w") as f:
            f.write(TOKEN)
        cls.data = tempfile.TemporaryDirectory(prefix="dhp-tls-data-")
        subprocess.run([GEN_SHAPES, "--out", os.path.join(cls.data.name, "data", "shapes"),
                        "--count", "64", "--size", "112", "--seed", "7"],
                       check=True, capture_output=True)
        cls.cluster = Cluster(BINS, heartbeat_timeout_ms=3000, heartbeat_interval_ms=200)
        cls.cluster.start_controller(extra_args=cls.server_flags() + [
            "--auth-token-file", cls.token_file,
            "--tls-client-ca-file", cls.pem("ca")])

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        cls.data.cleanup()
        cls.certs.cleanup()

    @classmethod
    def pem(cls, name, ext="pem"):
        return os.path.join(cls.certs.name, "%s.%s" % (name, ext))

    @classmethod
    def server_flags(cls):
        return ["--tls-cert-file", cls.pem("server"), "--tls-key-file", cls.pem("server", "key")]

    def https(self, path, port=None, token=TOKEN, client=None, ca="ca"):
        """GET over HTTPS with Python's ssl; returns (status, body)."""
        context = ssl.create_default_context(cafile=self.pem(ca))
        if client:
            context.load_cert_chain(self.pem(client), self.pem(client, "key"))
        req = urllib.request.Request(
            "https://127.0.0.1:%d%s" % (port or self.cluster.http_port, path))
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=10, context=context) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def client(self, port=None, **kwargs):
        return dhp_client.Client("127.0.0.1:%d" % (port or self.cluster.grpc_port), token=TOKEN,
                                 timeout=5, **kwargs)

    # ---- REST --------------------------------------------------------------------------

    def test_rest_serves_https_with_the_token_checked(self):
        self.assertEqual(self.https("/healthz", token=None)[0], 200)
        self.assertEqual(self.https("/v1/jobs", token=None)[0], 401)
        status, body = self.https("/v1/jobs")
        self.assertEqual(status, 200, body)
        status, body = self.https("/v1/jobs", client="client")  # a verified client certificate
        self.assertEqual(status, 200, body)
        status, text = self.https("/metrics", token=None)
        self.assertEqual(status, 200)
        self.assertIn('code="UNAUTHENTICATED",method="ListJobs",transport="rest"', text)

    def test_rest_answers_every_connection_and_keeps_them_alive(self):
        # Regression: the request often arrives with the client's last handshake bytes, which
        # TLS reads ahead of poll(); such a request used to wait for the idle timeout.
        for _ in range(30):
            self.assertEqual(self.https("/healthz", token=None)[0], 200)
        context = ssl.create_default_context(cafile=self.pem("ca"))
        conn = http.client.HTTPSConnection("127.0.0.1", self.cluster.http_port, timeout=5,
                                           context=context)
        try:
            for _ in range(5):  # one connection, one handshake, five requests
                conn.request("GET", "/v1/events?follow=false",
                             headers={"Authorization": "Bearer " + TOKEN})
                resp = conn.getresponse()
                self.assertEqual(resp.status, 200)
                for line in resp.read().decode().splitlines():  # NDJSON, chunked
                    self.assertIn("type", json.loads(line))
        finally:
            conn.close()

    def test_rest_refuses_what_is_not_tls_or_not_trusted(self):
        # Plain HTTP to the TLS port: no HTTP answer, the handshake fails and it closes.
        with socket.create_connection(("127.0.0.1", self.cluster.http_port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = s.recv(4096)
        self.assertFalse(reply.startswith(b"HTTP/"), reply)
        # A client that does not trust our CA refuses the server.
        with self.assertRaises(urllib.error.URLError) as e:
            self.https("/healthz", ca="rogue-ca")
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(e.exception))
        # A client certificate from another CA is refused by the server.
        with self.assertRaises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            self.https("/v1/jobs", client="rogue")
        # And the server still serves.
        self.assertEqual(self.https("/healthz")[0], 200)

    # ---- gRPC --------------------------------------------------------------------------

    def test_grpc_needs_the_ca_and_refuses_foreign_client_certificates(self):
        with self.client(ca_file=self.pem("ca")) as c:
            self.assertIsInstance(c.list(), list)
        with self.client(ca_file=self.pem("ca"), cert_file=self.pem("client"),
                         key_file=self.pem("client", "key")) as c:
            c.list()
        with self.client() as c:  # plain text against a TLS port
            with self.assertRaises(dhp_client.Unavailable):
                c.list()
        with self.client(ca_file=self.pem("rogue-ca")) as c:
            with self.assertRaises(dhp_client.Unavailable):
                c.list()
        with self.client(ca_file=self.pem("ca"), cert_file=self.pem("rogue"),
                         key_file=self.pem("rogue", "key")) as c:
            with self.assertRaises(dhp_client.Unavailable):
                c.list()

    def test_dhpctl_takes_a_ca_file(self):
        env = {"DHP_TOKEN": TOKEN}
        code, out, err = self.cluster.dhpctl("--ca-file", self.pem("ca"), "list", env=env)
        self.assertEqual(code, 0, err)
        code, _, err = self.cluster.dhpctl("--timeout-ms", "3000", "list", env=env)
        self.assertNotEqual(code, 0)
        code, _, err = self.cluster.dhpctl("--ca-file", "/nonexistent/ca.pem", "list", env=env)
        self.assertEqual(code, 2)
        self.assertIn("/nonexistent/ca.pem", err)
        code, _, err = self.cluster.dhpctl("--ca-file", self.pem("ca"), "--cert-file",
                                           self.pem("client"), "list", env=env)
        self.assertEqual(code, 2)
        self.assertIn("go together", err)

    # ---- a job whose agent and ranks speak TLS with a client certificate -----------------

    def test_an_agent_and_its_ranks_train_over_tls(self):
        self.cluster.start_worker("node-tls", cpu_slots=2, env={"DHP_TOKEN": TOKEN}, extra_args=[
            "--rank-binary", RANK, "--data-root", self.data.name, "--stop-grace-ms", "3000",
            "--ca-file", self.pem("ca"), "--cert-file", self.pem("client"),
            "--key-file", self.pem("client", "key")])
        with self.client(ca_file=self.pem("ca")) as c:
            wait_for(lambda: [n for n in c.nodes() if n.state == node_pb2.NODE_STATE_READY],
                     timeout=20, what="node-tls READY")
            job = c.submit(spec_text(self.cluster, "tls-tiny", steps=6, every=3))
            final = c.wait(job.id, timeout=240)
            self.assertEqual(final.state, job_pb2.JOB_STATE_SUCCEEDED,
                             self.cluster.worker_log("node-tls")[-3000:])
            got = c.get(job.id)
            self.assertEqual(got.runs[0].last_step, 6)
            self.assertGreater(got.runs[0].last_loss, 0)

    # ---- requiring client certificates, and wrong configurations ------------------------

    def test_a_controller_that_requires_client_certificates(self):
        cluster = Cluster(BINS)
        try:
            cluster.start_controller(extra_args=self.server_flags() + [
                "--tls-client-ca-file", self.pem("ca"), "--tls-require-client-cert"])
            with self.client(port=cluster.grpc_port, ca_file=self.pem("ca")) as c:
                with self.assertRaises(dhp_client.Unavailable):
                    c.list()
            with self.client(port=cluster.grpc_port, ca_file=self.pem("ca"),
                             cert_file=self.pem("client"), key_file=self.pem("client", "key")) as c:
                c.list()
            with self.assertRaises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
                self.https("/healthz", port=cluster.http_port)
            self.assertEqual(self.https("/healthz", port=cluster.http_port, client="client")[0],
                             200)
        finally:
            cluster.close()

    def test_wrong_tls_settings_are_refused_at_start(self):
        cases = [
            (["--tls-cert-file", self.pem("server")], "listen.tls"),
            (["--tls-cert-file", self.pem("server"), "--tls-key-file", self.pem("client", "key")],
             "does not match"),
            (self.server_flags() + ["--tls-require-client-cert"], "client_ca_file"),
            (["--tls-cert-file", self.token_file, "--tls-key-file", self.pem("server", "key")],
             "not a PEM file"),
            (["--tls-cert-file", "/nonexistent.pem", "--tls-key-file", self.pem("server", "key")],
             "/nonexistent.pem"),
        ]
        for flags, message in cases:
            proc = subprocess.run(
                [BINS.controller, "--data-dir", tempfile.mkdtemp(prefix="dhp-tls-bad-"),
                 "--grpc-port", "0", "--http-port", "0"] + flags,
                capture_output=True, text=True, timeout=30)
            self.assertNotEqual(proc.returncode, 0, flags)
            self.assertIn(message, proc.stderr + proc.stdout, flags)


if __name__ == "__main__":
    BINS = Binaries(*sys.argv[1:5])
    RANK = os.path.abspath(sys.argv[5])
    GEN_SHAPES = os.path.abspath(sys.argv[6])
    unittest.main(argv=sys.argv[:1] + sys.argv[7:], verbosity=2)
