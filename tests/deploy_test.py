"""Checks the deployment files under deploy/ against the binaries they run.

Usage: deploy_test.py CONTROLLER WORKER RELAY DEPLOY_DIR [unittest args].

Every flag in the systemd units, the Kubernetes manifests and the Dockerfile's CMD must be one
the binary's --help lists; the Kubernetes ConfigMap's controller.yaml must pass
`dhp-controller --check-config`; Services, probes and scrape configs must use its ports; the
worker DaemonSet must get GPUs, host networking and IPC; promtool must accept the Prometheus
configs; the relay overlay (deploy/k8s/relay) must point agents at the relay Service and
Prometheus at every relay pod. Manifests are read with PyYAML (Debian python3-yaml, which
tools/setup.sh installs); without it the structural checks fail, unless DHP_NO_YAML=1 says to
skip them. A missing promtool fails likewise unless DHP_NO_PROMTOOL=1.
"""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import yaml
except ImportError:  # python3-yaml is not among tools/setup.sh's packages
    yaml = None

CONTROLLER = WORKER = RELAY = DEPLOY = None
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def read(path):
    with open(path) as f:
        return f.read()


def help_flags(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return set(FLAG.findall(out.stdout))


def flags_in(argv):
    """The flag names in an argv list ("--a=1" and "--a 1" both give "--a")."""
    return {a.split("=", 1)[0] for a in argv if a.startswith("--")}


def strip_comments(text):
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


def needs_yaml(test):
    if yaml is None and os.environ.get("DHP_NO_YAML"):
        test.skipTest("python3-yaml is not importable and DHP_NO_YAML is set")
    test.assertIsNotNone(yaml, "python3-yaml is not importable: run tools/setup.sh, or set "
                         "DHP_NO_YAML=1 to skip the structural checks")


class DeployTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.flags = {"dhp-controller": help_flags(CONTROLLER), "dhp-worker": help_flags(WORKER),
                     "dhp-relay": help_flags(RELAY)}
        cls.k8s = os.path.join(DEPLOY, "k8s")  # its kustomization builds base/
        cls.base = os.path.join(cls.k8s, "base")  # the manifests; overlays beside it
        cls.docs = {}  # base manifest file name -> its YAML documents
        if yaml is None:
            sys.stderr.write("deploy_test: python3-yaml not importable; structural checks "
                             "skipped, text checks only\n")
            return
        for path in sorted(glob.glob(os.path.join(cls.base, "*.yaml"))):
            cls.docs[os.path.basename(path)] = [d for d in yaml.safe_load_all(read(path)) if d]

    # ---- helpers ----------------------------------------------------------------------------

    def objects(self, kind):
        return [d for docs in self.docs.values() for d in docs if d.get("kind") == kind]

    def one(self, kind, name):
        found = [o for o in self.objects(kind) if o["metadata"]["name"] == name]
        self.assertEqual(len(found), 1, "%s %s" % (kind, name))
        return found[0]

    def container(self, kind, name):
        containers = self.one(kind, name)["spec"]["template"]["spec"]["containers"]
        self.assertEqual(len(containers), 1)
        return containers[0]

    def configmap_text(self):
        """controller.yaml as the ConfigMap holds it (with or without PyYAML)."""
        if yaml is not None:
            return self.one("ConfigMap", "dhp-controller-config")["data"]["controller.yaml"]
        text = read(os.path.join(self.base, "controller-config.yaml"))
        m = re.search(r"\n  controller\.yaml: \|\n((?:    .*\n|\s*\n)+)", text)
        self.assertIsNotNone(m, "controller.yaml block in controller-config.yaml")
        return "".join(line[4:] + "\n" for line in m.group(1).splitlines())

    def check_config(self, text, token_file):
        """Runs dhp-controller --check-config on `text` with auth.token_file replaced."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "controller.yaml")
            with open(path, "w") as f:
                f.write(re.sub(r"token_file: \S+", "token_file: " + token_file, text))
            return subprocess.run([CONTROLLER, "--config", path, "--check-config"],
                                  capture_output=True, text=True, timeout=30)

    # ---- all YAML ---------------------------------------------------------------------------

    def test_every_yaml_file_parses(self):
        paths = [p for p in glob.glob(os.path.join(DEPLOY, "**", "*.y*ml"), recursive=True)]
        self.assertGreaterEqual(len(paths), 9, paths)
        for path in paths:
            text = read(path)
            self.assertNotIn("\t", text, path + ": tab in YAML")
            if yaml is None:
                continue
            for doc in yaml.safe_load_all(text):
                self.assertIsInstance(doc, dict, path)
                if "/k8s/" in path:
                    self.assertIn("apiVersion", doc, path)
                    self.assertIn("kind", doc, path)

    def test_kustomization_lists_every_manifest(self):
        files = {os.path.basename(p) for p in glob.glob(os.path.join(self.base, "*.yaml"))}
        files.discard("kustomization.yaml")
        text = read(os.path.join(self.base, "kustomization.yaml"))
        if yaml is not None:
            listed = yaml.safe_load(text)["resources"]
        else:
            listed = re.findall(r"(?m)^  - (\S+\.yaml)$", text)
        self.assertEqual(sorted(listed), sorted(files))

    def test_no_kustomization_builds_on_a_directory_that_holds_it(self):
        # kustomize (v5) refuses that as a cycle: `kubectl apply -k deploy/k8s/relay` failed so
        # while the overlays lay inside the base's directory.
        for path in glob.glob(os.path.join(self.k8s, "**", "kustomization.yaml"), recursive=True):
            here = os.path.dirname(os.path.abspath(path))
            for line in re.findall(r"(?m)^  - (\S+)", read(path)):
                target = os.path.abspath(os.path.join(here, line))
                if os.path.isdir(target):
                    self.assertFalse(here.startswith(target.rstrip("/") + "/"),
                                     "%s builds on %s, which holds it" % (path, line))

    def test_kubectl_kustomize_renders_the_base_and_each_overlay(self):
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            self.skipTest("no kubectl on PATH (Debian 12's kubernetes-client 1.20 predates "
                          "the kustomize these files are written for)")
        rendered = {}
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        k8s = os.path.join(tmp, "k8s")  # copied: kustomize does not follow Bazel's symlinks
        shutil.copytree(self.k8s, k8s)
        for name in ("", "relay", "tls"):
            r = subprocess.run([kubectl, "kustomize", os.path.join(k8s, name)],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, "kubectl kustomize deploy/k8s/%s: %s" %
                             (name, r.stderr))
            rendered[name] = r.stdout
        kinds = lambda text: sorted(re.findall(r"(?m)^kind: (\S+)", text))
        self.assertEqual(len(kinds(rendered[""])), 8)
        self.assertEqual(kinds(rendered["tls"]), kinds(rendered[""]))
        self.assertEqual(len(kinds(rendered["relay"])), 11)  # + the relay Deployment, 2 Services
        for name, text in rendered.items():  # every object in the namespace, every image set
            self.assertNotIn("image: dhp\n", text, name)
            self.assertEqual(text.count("namespace: dhp\n"), len(kinds(text)) - 1, name)
        self.assertIn("value: dhp-relay:7075", rendered["relay"])
        self.assertIn("- /usr/local/bin/dhp-relay", rendered["relay"])
        self.assertIn("- --tls-cert-file", rendered["tls"])
        self.assertNotIn("--tls-cert-file", rendered[""])

    # ---- flags ------------------------------------------------------------------------------

    def assert_known(self, argv, where):
        binary = os.path.basename(argv[0])
        self.assertIn(binary, self.flags, where)
        unknown = flags_in(argv[1:]) - self.flags[binary]
        self.assertFalse(unknown, "%s: %s does not accept %s" % (where, binary, sorted(unknown)))

    def test_systemd_units_use_known_flags_and_stop_ranks_gracefully(self):
        units = {}
        for path in glob.glob(os.path.join(DEPLOY, "systemd", "*.service")):
            keys = {}
            for line in read(path).splitlines():
                if "=" in line and not line.startswith("#"):
                    k, v = line.split("=", 1)
                    keys[k.strip()] = v.strip()
            self.assert_known(shlex.split(keys["ExecStart"]), path)
            for k, v in [("User", "dhp"), ("StateDirectory", "dhp"), ("Restart", "on-failure"),
                         ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                         ("PrivateTmp", "yes")]:
                self.assertEqual(keys.get(k), v, "%s: %s" % (path, k))
            self.assertIn("/var/lib/dhp", keys.get("ReadWritePaths", ""), path)
            units[os.path.basename(path)] = keys
        self.assertEqual(units["dhp-controller.service"]["ExecStart"],
                         "/usr/local/bin/dhp-controller --config /etc/dhp/controller.yaml")
        worker = units["dhp-worker.service"]
        self.assertEqual(worker["EnvironmentFile"], "/etc/dhp/worker.env")
        self.assertEqual(worker["KillMode"], "mixed")
        grace = re.search(r"--stop-grace-ms[= ](\d+)", worker["ExecStart"])
        self.assertIsNotNone(grace)
        self.assertGreater(int(worker["TimeoutStopSec"].rstrip("s")) * 1000, int(grace.group(1)))
        # Preempted ranks get their job's restart.preemption_grace_s (default 120 s) first.
        self.assertGreater(int(worker["TimeoutStopSec"].rstrip("s")), 120)
        env = read(os.path.join(DEPLOY, "systemd", "worker.env.example"))
        self.assertRegex(env, r"(?m)^DHP_SERVER=")
        self.assertRegex(env, r"(?m)^DHP_TOKEN=")
        self.assertRegex(env, r"(?m)^#DHP_HEARTBEAT_RELAY=\S+:7075$")
        self.assertIn("(Env:DHP_HEARTBEAT_RELAY)", subprocess.run(
            [WORKER, "--help"], capture_output=True, text=True, timeout=30).stdout)
        relay = units["dhp-relay.service"]
        self.assertEqual(relay["EnvironmentFile"], "/etc/dhp/relay.env")
        argv = shlex.split(relay["ExecStart"])
        self.assertIn("0.0.0.0:7075", argv[argv.index("--listen") + 1])
        self.assertEqual(argv[argv.index("--metrics-listen") + 1], "0.0.0.0:7076")
        env = read(os.path.join(DEPLOY, "systemd", "relay.env.example"))
        self.assertRegex(env, r"(?m)^DHP_SERVER=")
        self.assertRegex(env, r"(?m)^DHP_TOKEN=")

    def test_kubernetes_containers_use_known_flags(self):
        if yaml is None:  # text fallback: any flag in the manifests is some binary's flag
            known = set().union(*self.flags.values())
            for path in glob.glob(os.path.join(self.base, "*.yaml")):
                unknown = set(FLAG.findall(strip_comments(read(path)))) - known
                self.assertFalse(unknown, "%s: %s" % (path, sorted(unknown)))
            return
        seen = 0
        for kind in ("StatefulSet", "DaemonSet"):
            for obj in self.objects(kind):
                for c in obj["spec"]["template"]["spec"]["containers"]:
                    self.assert_known(c["command"] + c.get("args", []),
                                      "%s %s" % (kind, obj["metadata"]["name"]))
                    seen += 1
        self.assertEqual(seen, 2)

    def test_dockerfile_cmd_uses_known_flags(self):
        text = read(os.path.join(DEPLOY, "container", "Dockerfile"))
        cmds = re.findall(r"(?m)^CMD (\[.*\])$", text)
        self.assertEqual(len(cmds), 1)
        self.assert_known(json.loads(cmds[0]), "Dockerfile CMD")
        self.assertRegex(text, r"(?m)^USER (?!root)\S+$")  # the runtime stage is not root
        self.assertEqual(len(re.findall(r"(?m)^FROM ", text)), 2)  # build + runtime stages

    # ---- the controller's configuration and ports -------------------------------------------

    def test_configmap_config_validates_and_requires_a_token(self):
        text = self.configmap_text()
        with tempfile.NamedTemporaryFile("w", suffix=".token") as token:
            token.write("t0ken\n")
            token.flush()
            out = self.check_config(text, token.name)
            self.assertEqual(out.returncode, 0, out.stderr)
            effective = out.stdout
            # The same file with a broken value is refused with exit status 2, naming the key.
            out = self.check_config(text + "heartbeat_typo: 1\n", token.name)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn("heartbeat_typo: unknown key", out.stderr)
        # Bound to every interface, so a token is required (main.cc only warns).
        self.assertRegex(effective, r"(?m)^  bind: 0\.0\.0\.0$")
        self.assertRegex(text, r"(?m)^  token_file: /\S+")

    def test_configmap_and_secret_are_mounted_where_the_config_says(self):
        needs_yaml(self)
        config = yaml.safe_load(self.configmap_text())
        c = self.container("StatefulSet", "dhp-controller")
        spec = self.one("StatefulSet", "dhp-controller")["spec"]
        volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        config_path = c["args"][c["args"].index("--config") + 1]
        cm = volumes[mounts[os.path.dirname(config_path)]]["configMap"]["name"]
        self.assertEqual(cm, "dhp-controller-config")
        token = config["auth"]["token_file"]
        secret = volumes[mounts[os.path.dirname(token)]]["secret"]["secretName"]
        self.one("Secret", secret)
        self.assertIn(os.path.basename(token), self.one("Secret", secret)["stringData"])
        # data_dir on the volumeClaimTemplate; checkpoint_root on the shared RWX claim, mounted
        # at the same path by the worker.
        self.assertEqual(spec["replicas"], 1)
        template = spec["volumeClaimTemplates"][0]["metadata"]["name"]
        self.assertEqual(mounts[config["data_dir"]], template)
        claim = volumes[mounts[config["checkpoint_root"]]]["persistentVolumeClaim"]["claimName"]
        self.assertIn("ReadWriteMany",
                      self.one("PersistentVolumeClaim", claim)["spec"]["accessModes"])
        w = self.container("DaemonSet", "dhp-worker")
        wvolumes = {v["name"]: v for v in
                    self.one("DaemonSet", "dhp-worker")["spec"]["template"]["spec"]["volumes"]}
        wmounts = {m["mountPath"]: m["name"] for m in w["volumeMounts"]}
        self.assertEqual(
            wvolumes[wmounts[config["checkpoint_root"]]]["persistentVolumeClaim"]["claimName"],
            claim)

    def test_services_probes_and_scrapes_use_the_configured_ports(self):
        needs_yaml(self)
        listen = yaml.safe_load(self.configmap_text())["listen"]
        want = {"grpc": listen["grpc_port"], "http": listen["http_port"]}
        for name in ("dhp-controller", "dhp-controller-headless"):
            ports = {p["name"]: p["port"] for p in self.one("Service", name)["spec"]["ports"]}
            self.assertEqual(ports, want, name)
        self.assertEqual(self.one("Service", "dhp-controller-headless")["spec"]["clusterIP"],
                         "None")
        self.assertEqual(self.one("StatefulSet", "dhp-controller")["spec"]["serviceName"],
                         "dhp-controller-headless")
        c = self.container("StatefulSet", "dhp-controller")
        self.assertEqual({p["name"]: p["containerPort"] for p in c["ports"]}, want)
        for probe in ("livenessProbe", "readinessProbe"):
            self.assertEqual(c[probe]["httpGet"], {"path": "/healthz", "port": "http"})
        pod = self.one("StatefulSet", "dhp-controller")["spec"]["template"]["metadata"]
        self.assertEqual(pod["annotations"]["prometheus.io/port"], str(want["http"]))
        self.assertEqual(pod["annotations"]["prometheus.io/path"], "/metrics")
        prom = yaml.safe_load(read(os.path.join(DEPLOY, "prometheus",
                                                "prometheus-kubernetes.yml")))
        self.assertEqual(prom["scrape_configs"][0]["dns_sd_configs"][0]["port"], want["http"])
        prom = yaml.safe_load(read(os.path.join(DEPLOY, "prometheus", "prometheus.yml")))
        self.assertEqual(prom["scrape_configs"][0]["static_configs"][0]["targets"],
                         ["127.0.0.1:7080"])  # the built-in default http port

    # ---- the worker DaemonSet ---------------------------------------------------------------

    def test_worker_daemonset_gets_gpus_host_network_and_the_controller(self):
        if yaml is None:
            text = read(os.path.join(self.base, "worker-daemonset.yaml"))
            self.assertRegex(text, r"nvidia\.com/gpu: [1-9]")
            self.assertRegex(text, r"hostNetwork: true")
            self.assertRegex(text, r"hostIPC: true")
            return
        ds = self.one("DaemonSet", "dhp-worker")["spec"]["template"]["spec"]
        c = self.container("DaemonSet", "dhp-worker")
        self.assertGreaterEqual(int(c["resources"]["limits"]["nvidia.com/gpu"]), 1)
        self.assertTrue(ds["hostNetwork"])
        self.assertTrue(ds["hostIPC"])
        self.assertEqual(ds["dnsPolicy"], "ClusterFirstWithHostNet")
        self.assertIn("/dev/shm", [m["mountPath"] for m in c["volumeMounts"]])
        env = {e["name"]: e for e in c["env"]}
        service = self.one("Service", "dhp-controller")
        grpc = [p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc"][0]
        self.assertEqual(env["DHP_SERVER"]["value"], "dhp-controller:%d" % grpc)
        self.assertEqual(env["DHP_TOKEN"]["valueFrom"]["secretKeyRef"]["name"], "dhp-api-token")
        self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP")
        args = c["args"]
        self.assertIn("--node-id=$(NODE_NAME)", args)
        self.assertIn("--address=$(POD_IP)", args)
        grace_ms = int([a for a in args if a.startswith("--stop-grace-ms=")][0].split("=")[1])
        self.assertGreater(ds["terminationGracePeriodSeconds"] * 1000, grace_ms)
        self.assertGreater(ds["terminationGracePeriodSeconds"], 120)  # preemption_grace_s

    # ---- Prometheus -------------------------------------------------------------------------

    def test_tls_overlay_uses_known_flags_and_mounts_its_secret(self):
        needs_yaml(self)
        tls = os.path.join(self.k8s, "tls")
        kustomization = yaml.safe_load(read(os.path.join(tls, "kustomization.yaml")))
        self.assertEqual(kustomization["resources"], ["../base"])
        patches = {p["path"]: yaml.safe_load(read(os.path.join(tls, p["path"])))
                   for p in kustomization["patches"]}
        by_kind = {p["kind"]: p for p in patches.values()}
        for kind, name in (("StatefulSet", "dhp-controller"), ("DaemonSet", "dhp-worker")):
            patch = by_kind[kind]
            self.assertEqual(patch["metadata"]["name"], name)
            base = self.container(kind, name)
            spec = patch["spec"]["template"]["spec"]
            (c,) = spec["containers"]
            self.assertEqual(c["name"], base["name"])  # merges into the base container
            (mount,) = c["volumeMounts"]
            (volume,) = spec["volumes"]
            self.assertEqual(mount["name"], volume["name"])
            self.assertEqual(volume["secret"]["secretName"], "dhp-tls")
            files = [a for a in c.get("args", []) if a.startswith("/etc/dhp-tls/")]
            files += [e["value"] for e in c.get("env", [])]
            self.assertTrue(files)
            for f in files:
                self.assertEqual(os.path.dirname(f), mount["mountPath"], f)
                self.assertIn(os.path.basename(f), ("tls.crt", "tls.key", "ca.crt"), f)
            if "args" in c:
                self.assert_known(base["command"] + c["args"], "tls/" + kind)
                self.assertEqual(c["args"][:len(base["args"])], base["args"])  # base args kept
                for probe in ("livenessProbe", "readinessProbe"):
                    self.assertEqual(c[probe]["httpGet"]["scheme"], "HTTPS")
        # The worker takes its CA from the environment (and passes it on to its ranks).
        worker_help = subprocess.run([WORKER, "--help"], capture_output=True, text=True).stdout
        for e in by_kind["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["env"]:
            self.assertIn(e["name"], worker_help)

    def test_relay_overlay_points_agents_and_prometheus_at_the_relays(self):
        needs_yaml(self)
        overlay = os.path.join(self.k8s, "relay")
        kustomization = yaml.safe_load(read(os.path.join(overlay, "kustomization.yaml")))
        self.assertEqual(kustomization["resources"], ["../base", "relay.yaml"])
        base = yaml.safe_load(read(os.path.join(self.base, "kustomization.yaml")))
        for key in ("namespace", "images"):  # the base's apply to the base's objects only
            self.assertEqual(kustomization[key], base[key], key)
        docs = [d for d in yaml.safe_load_all(read(os.path.join(overlay, "relay.yaml"))) if d]
        by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        deployment = by[("Deployment", "dhp-relay")]["spec"]
        (c,) = deployment["template"]["spec"]["containers"]
        argv = c["command"] + c["args"]
        self.assert_known(argv, "Deployment dhp-relay")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        flag = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in c["args"]}
        self.assertEqual(flag["--listen"], "0.0.0.0:%d" % ports["grpc"])
        self.assertEqual(flag["--metrics-listen"], "0.0.0.0:%d" % ports["metrics"])
        for probe in ("livenessProbe", "readinessProbe"):
            self.assertEqual(c[probe]["httpGet"], {"path": "/healthz", "port": "metrics"})
        env = {e["name"]: e for e in c["env"]}
        grpc = [p["port"] for p in self.one("Service", "dhp-controller")["spec"]["ports"]
                if p["name"] == "grpc"][0]
        self.assertEqual(env["DHP_SERVER"]["value"], "dhp-controller:%d" % grpc)
        self.assertEqual(env["DHP_TOKEN"]["valueFrom"]["secretKeyRef"]["name"], "dhp-api-token")
        labels = deployment["template"]["metadata"]["labels"]
        self.assertEqual(deployment["selector"]["matchLabels"], labels)
        service = by[("Service", "dhp-relay")]["spec"]
        headless = by[("Service", "dhp-relay-headless")]["spec"]
        self.assertEqual(service["selector"], labels)
        self.assertEqual(headless["selector"], labels)
        self.assertEqual(headless["clusterIP"], "None")
        (svc_port,) = service["ports"]
        self.assertEqual(svc_port["targetPort"], "grpc")
        # The agents' patch: the relay Service's port, by the variable dhp-worker reads.
        (patch,) = kustomization["patches"]
        patch = yaml.safe_load(read(os.path.join(overlay, patch["path"])))
        self.assertEqual((patch["kind"], patch["metadata"]["name"]), ("DaemonSet", "dhp-worker"))
        (w,) = patch["spec"]["template"]["spec"]["containers"]
        self.assertEqual(w["name"], self.container("DaemonSet", "dhp-worker")["name"])
        self.assertEqual(w["env"], [{"name": "DHP_HEARTBEAT_RELAY",
                                     "value": "dhp-relay:%d" % svc_port["port"]}])
        # Prometheus scrapes every relay pod's metrics port.
        prom = yaml.safe_load(read(os.path.join(DEPLOY, "prometheus",
                                                "prometheus-kubernetes.yml")))
        (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "dhp-relay"]
        (sd,) = job["dns_sd_configs"]
        self.assertEqual(sd["names"], ["dhp-relay-headless.dhp.svc.cluster.local"])
        self.assertEqual(sd["port"], ports["metrics"])

    def test_promtool_accepts_the_scrape_configs(self):
        promtool = shutil.which("promtool") or "/usr/bin/promtool"
        if os.environ.get("DHP_NO_PROMTOOL"):
            self.skipTest("DHP_NO_PROMTOOL is set")
        self.assertTrue(os.access(promtool, os.X_OK),
                        "promtool is missing: run tools/setup.sh (Debian's prometheus package), "
                        "or set DHP_NO_PROMTOOL=1 to skip")
        paths = sorted(p for p in glob.glob(os.path.join(DEPLOY, "prometheus", "*.yml"))
                       if not p.endswith("alerts.yml"))  # rules: tests/monitoring_test.py
        self.assertEqual(len(paths), 2)
        for path in paths:
            out = subprocess.run([promtool, "check", "config", path], capture_output=True,
                                 text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    CONTROLLER, WORKER, RELAY, DEPLOY = (os.path.abspath(a) for a in sys.argv[1:5])
    unittest.main(argv=[sys.argv[0]] + sys.argv[5:], verbosity=2)
