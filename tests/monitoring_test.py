"""Monitoring end to end: the Grafana dashboards and Prometheus alerting rules against the
metrics a real dhp-controller exports, and a real Prometheus server scraping it during a job.

Usage: monitoring_test.py CONTROLLER WORKER DHPCTL CONFIGS_DIR RANK GEN_SHAPES [unittest args].
Reads dashboards/*.json, deploy/prometheus/alerts.yml and controller/run_metrics.h relative to
the working directory (the workspace root under Bazel).

  * Every metric name an expression of a dashboard (panel targets and template variables) or
    of an alerting rule uses is one the controller's /metrics lists (each family prints its
    HELP/TYPE from the start), and every dhp_ family it lists is documented in run_metrics.h.
  * The dashboards are well formed: a `datasource` variable of type datasource that every
    panel and query uses, unique panel ids, grid positions.
  * promtool accepts the rules (`promtool check rules`) and their unit tests (`promtool test
    rules`: each alert fires on the series it is about, and not on healthy ones).
  * A real Prometheus (Debian's /usr/bin/prometheus) on loopback scrapes the controller every
    second while the tiny model trains on a real agent with real ranks; its HTTP API returns
    the job's and the stages' series; it loads the alerting rules; every dashboard expression
    is valid PromQL to it. `dhpctl top --once` shows the running job's ranks.
"""

import glob
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from dhp_cluster import Binaries, Cluster, wait_for
import runs_test

try:
    import yaml
except ImportError:
    yaml = None

BINS = None
RANK = None
DATA_ROOT = None

DASHBOARDS = "dashboards"
ALERTS = "deploy/prometheus/alerts.yml"
CONTRACT = "controller/run_metrics.h"
RELAY_CONTRACT = "worker/relay/relay_metrics.h"
PROMTOOL = "/usr/bin/promtool"
PROMETHEUS = "/usr/bin/prometheus"

# Families the controller registers outside controller/run_metrics.h (documented elsewhere:
# the store's quarantine in controller/store.h and the README; the loop's tick phases, lag,
# lag causes, busy time and submit batches in controller/controller.cc, the API's wait in
# api/instrumented_service.h, and the README).
BASE_FAMILIES = {"dhp_jobs", "dhp_nodes", "dhp_events_total", "dhp_api_requests_total",
                 "dhp_api_request_duration_seconds", "dhp_store_quarantined_rows_total",
                 "dhp_store_quarantine_rows", "dhp_controller_tick_seconds",
                 "dhp_controller_loop_lag_seconds", "dhp_api_request_wait_seconds",
                 "dhp_controller_loop_lag_cause_seconds",
                 "dhp_controller_loop_busy_seconds_total", "dhp_controller_submit_batch_jobs",
                 "dhp_store_file_bytes", "dhp_store_wal_hold_seconds"}
# Written by Prometheus itself for every scrape target.
SYNTHETIC = {"up"}

PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                "group_right", "bool", "offset", "inf", "nan"}


# ---- reading expressions ------------------------------------------------------------------

def metric_names(expr):
    """The metric names a PromQL expression selects (Grafana variables allowed)."""
    lv = re.match(r"^\s*label_values\((.*),\s*[a-zA-Z_]\w*\s*\)\s*$", expr, re.S)
    if lv:
        expr = lv.group(1)
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{[^}]*\}|\$\w+", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])[a-zA-Z_:][\w:]*", e):
        if e[m.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if m.group(0).lower() in PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def dashboard_queries(path):
    """[(where, expr)] of a dashboard's panel targets and query variables."""
    with open(path) as f:
        dash = json.load(f)
    out = []
    for p in walk_panels(dash.get("panels", [])):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append(("%s: panel %r" % (path, p.get("title")), t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if q:
            out.append(("%s: variable %s" % (path, v["name"]), q))
    return out


def rule_exprs(path):
    """[(where, expr)] of a Prometheus rule file."""
    with open(path) as f:
        text = f.read()
    if yaml is not None:
        doc = yaml.safe_load(text)
        return [("%s: %s" % (path, r.get("alert") or r.get("record")), r["expr"])
                for g in doc["groups"] for r in g["rules"]]
    # Without PyYAML: `expr: x` or a block scalar `expr: |` followed by deeper lines.
    out, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)expr:\s*(.*)$", line)
        if not m:
            continue
        if m.group(2) not in ("|", ">", "|-", ">-"):
            out.append((path, m.group(2)))
            continue
        body = []
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= len(m.group(1)):
                break
            body.append(nxt)
        out.append((path, "\n".join(body)))
    return out


def all_queries():
    queries = []
    for path in sorted(glob.glob(os.path.join(DASHBOARDS, "*.json"))):
        queries += dashboard_queries(path)
    return queries + rule_exprs(ALERTS)


def exported_families(metrics_text):
    """{name: type} from the # TYPE lines of an exposition."""
    return dict(re.findall(r"(?m)^# TYPE (\S+) (\S+)$", metrics_text))


def sample_names(families):
    """Every sample name the families render (histograms add _bucket, _sum and _count)."""
    names = set()
    for name, kind in families.items():
        names.add(name)
        if kind == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get_json(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read().decode())
    except urllib.error.HTTPError as e:  # 400 bad_data etc. carry a JSON body
        return json.loads(e.read().decode())


def http_get_text(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def need_promtool(test):
    if os.environ.get("DHP_NO_PROMTOOL"):
        test.skipTest("DHP_NO_PROMTOOL is set")
    test.assertTrue(os.access(PROMTOOL, os.X_OK),
                    "%s is missing: run tools/setup.sh (Debian's prometheus package), or set "
                    "DHP_NO_PROMTOOL=1 to skip" % PROMTOOL)


# ---- the static checks --------------------------------------------------------------------

class MetricNamesTest(unittest.TestCase):
    def test_the_expression_reader(self):
        self.assertEqual(metric_names(
            'histogram_quantile(0.99, sum by (le, method) '
            '(rate(dhp_api_request_duration_seconds_bucket{job="$job"}[$__rate_interval])))'),
            {"dhp_api_request_duration_seconds_bucket"})
        self.assertEqual(metric_names(
            '(time() - a_ts{x="y"}) > 300 and on (job) b{state=~"A|B"} == 1'), {"a_ts", "b"})
        self.assertEqual(metric_names("label_values(dhp_rank_step{job=\"$job\"}, rank)"),
                         {"dhp_rank_step"})
        self.assertEqual(metric_names("x / ignoring (kind) y > 1e3 or vector(0)"), {"x", "y"})

    def test_every_metric_the_dashboards_and_rules_use_is_exported(self):
        queries = all_queries()
        self.assertGreater(len(queries), 30)
        cluster = Cluster(BINS)
        try:
            cluster.start_controller()
            status, text = cluster.http("GET", "/metrics")
            relay, ports = runs_test.start_relay(cluster)
            try:
                relay_text = http_get_text("http://127.0.0.1:%d/metrics" % ports["metrics_port"])
            finally:
                relay.terminate()
                relay.wait()
        finally:
            cluster.close()
        self.assertEqual(status, 200, text)
        families = exported_families(text)
        relay_families = exported_families(relay_text)
        exported = sample_names(families) | sample_names(relay_families) | SYNTHETIC
        used, missing = set(), []
        for where, expr in queries:
            names = metric_names(expr)
            self.assertTrue(names, "%s: no metric in %r" % (where, expr))
            used |= names
            missing += ["%s (%s)" % (n, where) for n in sorted(names - exported)]
        self.assertEqual(missing, [], "used but not exported by dhp-controller or dhp-relay")
        for name in ["dhp_job_step", "dhp_job_restarts", "dhp_job_last_progress_timestamp_seconds",
                     "dhp_stage_tokens_per_second", "dhp_stage_step_seconds",
                     "dhp_stage_memory_bytes", "dhp_collective_bytes", "dhp_nodes", "dhp_slots",
                     "dhp_queued_jobs", "dhp_rank_memory_capacity_bytes"]:
            self.assertIn(name, used)

        # Every dhp_ family is part of the documented contract.
        with open(CONTRACT) as f:
            contract = set(re.findall(r"\bdhp_[a-z0-9_]+", f.read()))
        undocumented = sorted(n for n in families
                              if n.startswith("dhp_") and n not in contract | BASE_FAMILIES)
        self.assertEqual(undocumented, [], "exported but not documented in " + CONTRACT)
        with open(RELAY_CONTRACT) as f:
            relay_contract = set(re.findall(r"\bdhp_relay_[a-z0-9_]+", f.read()))
        self.assertEqual(sorted(relay_families), sorted(relay_contract),
                         "dhp-relay's families and those " + RELAY_CONTRACT + " documents")
        self.assertIn("dhp_relay_heartbeats_total", used)

    def test_dashboards_are_well_formed(self):
        paths = sorted(glob.glob(os.path.join(DASHBOARDS, "*.json")))
        self.assertEqual([os.path.basename(p) for p in paths],
                         ["cluster.json", "job-overview.json", "stage-drilldown.json"])
        uids = set()
        for path in paths:
            with open(path) as f:
                dash = json.load(f)
            self.assertGreaterEqual(dash["schemaVersion"], 36, path)
            self.assertNotIn(dash["uid"], uids)
            uids.add(dash["uid"])
            variables = {v["name"]: v for v in dash["templating"]["list"]}
            ds = variables.get("datasource")
            self.assertIsNotNone(ds, "%s has no datasource variable" % path)
            self.assertEqual((ds["type"], ds["query"]), ("datasource", "prometheus"), path)
            want = {"type": "prometheus", "uid": "${datasource}"}
            for v in variables.values():
                if v["type"] == "query":
                    self.assertEqual(v["datasource"], want, "%s: variable %s" % (path, v["name"]))
            if path.endswith(("job-overview.json", "stage-drilldown.json")):
                self.assertIn("job", variables, path)
                self.assertIn("label_values(dhp_job_step, job)", json.dumps(variables["job"]))
            if path.endswith("stage-drilldown.json"):
                self.assertIn("stage", variables)
                self.assertIn("rank", variables)
            ids = set()
            for p in walk_panels(dash["panels"]):
                where = "%s: panel %r" % (path, p.get("title"))
                self.assertNotIn(p["id"], ids, where)
                ids.add(p["id"])
                self.assertTrue({"h", "w", "x", "y"} <= set(p["gridPos"]), where)
                self.assertLessEqual(p["gridPos"]["x"] + p["gridPos"]["w"], 24, where)
                if p["type"] == "row":
                    continue
                self.assertEqual(p.get("datasource"), want, where)
                self.assertTrue(p.get("targets"), where)
                for t in p["targets"]:
                    self.assertEqual(t.get("datasource"), want, where)
                    self.assertTrue(t.get("expr"), where)


class RulesTest(unittest.TestCase):
    def test_promtool_checks_the_rules(self):
        need_promtool(self)
        out = subprocess.run([PROMTOOL, "check", "rules", ALERTS], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("SUCCESS: 8 rules found", out.stdout + out.stderr)
        names = [where.split(": ", 1)[1] for where, _ in rule_exprs(ALERTS)]
        for alert in ["DhpJobStalled", "DhpJobRestartLoop", "DhpNodeLost",
                      "DhpRankMemoryNearCapacity", "DhpJobMemoryNearCapacity"]:
            self.assertIn(alert, names)

    def test_the_commands_alerts_name_exist(self):
        """Each `dhpctl CMD` in a rule's annotations is a dhpctl command (DhpJobRestartLoop
        once named `dhpctl events JOB`, which did not take a job)."""
        with open(ALERTS, encoding="utf-8") as f:
            text = f.read()
        commands = set(re.findall(r"`dhpctl ([a-z]+)([^`]*)`", text))
        self.assertGreaterEqual(len(commands), 4)
        for cmd, args in commands:
            out = subprocess.run([BINS.dhpctl, cmd, "--help"], capture_output=True, text=True,
                                 timeout=30)
            self.assertEqual(out.returncode, 0, "dhpctl %s: %s" % (cmd, out.stderr))
            if "{{ $labels.job }}" in args:  # takes a job id
                self.assertRegex(out.stdout, r"(?m)^\s+job\b", "dhpctl %s takes no JOB" % cmd)

    def test_each_alert_fires_on_its_condition_only(self):
        need_promtool(self)
        with tempfile.TemporaryDirectory(prefix="dhp-rules-") as tmp:
            path = os.path.join(tmp, "alerts_test.yml")
            with open(path, "w") as f:
                f.write(RULE_TESTS.replace("ALERTS_FILE", os.path.abspath(ALERTS)))
            out = subprocess.run([PROMTOOL, "test", "rules", path], capture_output=True,
                                 text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


def firing(alert, eval_time, *label_sets):
    samples = "".join(
        "          - labels: 'ALERTS{alertname=\"%s\",alertstate=\"firing\",%s}'\n"
        "            value: 1\n" % (alert, labels) for labels in label_sets)
    return ("      - expr: ALERTS{alertname=\"%s\",alertstate=\"firing\"}\n"
            "        eval_time: %s\n"
            "        exp_samples:%s\n" % (alert, eval_time, "\n" + samples if samples else " []"))


# Series as Prometheus stores them after scraping the controller with honor_labels: true.
RULE_TESTS = """
rule_files: [ALERTS_FILE]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # j-stall stopped at time 0; j-live advances every minute; j-done stopped but SUCCEEDED.
      - series: 'dhp_job_last_progress_timestamp_seconds{job="j-stall",instance="c"}'
        values: '0x20'
      - series: 'dhp_job_state{job="j-stall",state="RUNNING",instance="c"}'
        values: '1x20'
      - series: 'dhp_job_last_progress_timestamp_seconds{job="j-live",instance="c"}'
        values: '0+60x20'
      - series: 'dhp_job_state{job="j-live",state="RUNNING",instance="c"}'
        values: '1x20'
      - series: 'dhp_job_last_progress_timestamp_seconds{job="j-done",instance="c"}'
        values: '0x20'
      - series: 'dhp_job_state{job="j-done",state="SUCCEEDED",instance="c"}'
        values: '1x20'
      # j-loop restarts 3 times within minutes; j-once once.
      - series: 'dhp_job_restarts{job="j-loop",instance="c"}'
        values: '0 0 1 1 2 2 3 3 3 3 3'
      - series: 'dhp_job_restarts{job="j-once",instance="c"}'
        values: '0 0 1 1 1 1 1 1 1 1 1'
      - series: 'dhp_nodes{state="LOST",job="dhp-controller",instance="c"}'
        values: '0 0 1 1 1 1 1 1 1 1 1'
      - series: 'dhp_nodes{state="READY",job="dhp-controller",instance="c"}'
        values: '2 2 1 1 1 1 1 1 1 1 1'
      # GPU rank 0 of j-gpu: 96 of 100 reserved (under both stages); rank 1: 50 reserved but a
      # large resident set (reserved wins). CPU rank 0 of j-cpu: 97 of 100 resident.
      - series: 'dhp_stage_memory_bytes{job="j-gpu",stage="vision",rank="0",kind="reserved",instance="c"}'
        values: '96x20'
      - series: 'dhp_stage_memory_bytes{job="j-gpu",stage="text",rank="0",kind="reserved",instance="c"}'
        values: '96x20'
      - series: 'dhp_stage_memory_bytes{job="j-gpu",stage="text",rank="0",kind="allocated",instance="c"}'
        values: '60x20'
      - series: 'dhp_stage_memory_bytes{job="j-gpu",stage="text",rank="1",kind="reserved",instance="c"}'
        values: '50x20'
      - series: 'dhp_stage_memory_bytes{job="j-gpu",stage="text",rank="1",kind="rss",instance="c"}'
        values: '99x20'
      - series: 'dhp_rank_memory_capacity_bytes{job="j-gpu",rank="0",instance="c"}'
        values: '100x20'
      - series: 'dhp_rank_memory_capacity_bytes{job="j-gpu",rank="1",instance="c"}'
        values: '100x20'
      - series: 'dhp_stage_memory_bytes{job="j-cpu",stage="text",rank="0",kind="rss",instance="c"}'
        values: '97x20'
      - series: 'dhp_rank_memory_capacity_bytes{job="j-cpu",rank="0",instance="c"}'
        values: '100x20'
      - series: 'dhp_stage_memory_bytes{job="j-cpu",stage="text",rank="1",kind="rss",instance="c"}'
        values: '40x20'
      - series: 'dhp_rank_memory_capacity_bytes{job="j-cpu",rank="1",instance="c"}'
        values: '100x20'
      # Jobs without per-rank series (metrics.rank_series_max_ranks): j-big's ranks reach 97%
      # of their memory, j-fine's 80%. j-gpu's ratio is high too, but its per-rank series are
      # there: DhpRankMemoryNearCapacity speaks for it.
      - series: 'dhp_job_memory_used_ratio{job="j-big",instance="c"}'
        values: '0.97x20'
      - series: 'dhp_job_memory_used_ratio{job="j-fine",instance="c"}'
        values: '0.8x20'
      - series: 'dhp_job_memory_used_ratio{job="j-gpu",instance="c"}'
        values: '0.96x20'
      - series: 'up{job="dhp-controller",instance="c"}'
        values: '1 1 0 0 0 0 0 0 0 0 0'
      # Relay r1 goes down at 2m; r2 stays up.
      - series: 'up{job="dhp-relay",instance="r1"}'
        values: '1 1 0 0 0 0 0 0 0 0 0'
      - series: 'up{job="dhp-relay",instance="r2"}'
        values: '1x20'
      # Per minute: r1 answers 60 OK (then stops, as it is down); r2 60 OK and, from 1m on,
      # 30 UNAVAILABLE (a third failed); r3 600 OK and 30 DEADLINE_EXCEEDED (5%).
      - series: 'dhp_relay_heartbeats_total{code="OK",job="dhp-relay",instance="r2"}'
        values: '0+60x20'
      - series: 'dhp_relay_heartbeats_total{code="UNAVAILABLE",job="dhp-relay",instance="r2"}'
        values: '0 0+30x19'
      - series: 'dhp_relay_heartbeats_total{code="OK",job="dhp-relay",instance="r3"}'
        values: '0+600x20'
      - series: 'dhp_relay_heartbeats_total{code="DEADLINE_EXCEEDED",job="dhp-relay",instance="r3"}'
        values: '0+30x20'
    promql_expr_test:
""" + "".join([
    firing("DhpJobStalled", "7m"),  # stalled since 5m+, pending for 2m
    firing("DhpJobStalled", "9m", 'instance="c",job="j-stall",severity="warning"'),
    firing("DhpJobRestartLoop", "5m"),
    firing("DhpJobRestartLoop", "6m", 'instance="c",job="j-loop",severity="warning"'),
    firing("DhpNodeLost", "2m"),
    firing("DhpNodeLost", "3m", 'instance="c",job="dhp-controller",severity="critical",'
                                'state="LOST"'),
    firing("DhpRankMemoryNearCapacity", "4m"),
    firing("DhpRankMemoryNearCapacity", "6m", 'job="j-cpu",rank="0",severity="warning"',
           'job="j-gpu",rank="0",severity="warning"'),
    firing("DhpJobMemoryNearCapacity", "4m"),
    firing("DhpJobMemoryNearCapacity", "6m", 'job="j-big",severity="warning"'),
    firing("DhpControllerDown", "4m", 'instance="c",job="dhp-controller",severity="critical"'),
    firing("DhpRelayDown", "3m"),
    firing("DhpRelayDown", "4m", 'instance="r1",job="dhp-relay",severity="warning"'),
    firing("DhpRelayHeartbeatsFailing", "5m"),
    firing("DhpRelayHeartbeatsFailing", "12m", 'instance="r2",severity="warning"'),
])


# ---- a real Prometheus during a real job ----------------------------------------------------

class PrometheusTest(unittest.TestCase):
    def setUp(self):
        if os.environ.get("DHP_NO_PROMETHEUS"):
            self.skipTest("DHP_NO_PROMETHEUS is set")
        self.assertTrue(os.access(PROMETHEUS, os.X_OK),
                        "%s is missing: run tools/setup.sh (Debian's prometheus package), or set "
                        "DHP_NO_PROMETHEUS=1 to skip the real Prometheus server" % PROMETHEUS)
        self.cluster = Cluster(BINS, heartbeat_timeout_ms=3000, heartbeat_interval_ms=200)
        self.cluster.start_controller()
        self.prometheus = None
        self.prom_log = None

    def tearDown(self):
        if self.prometheus is not None:
            self.prometheus.terminate()
            try:
                self.prometheus.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.prometheus.kill()
                self.prometheus.wait()
        if self.prom_log is not None:
            self.prom_log.close()
        self.cluster.close()

    def start_prometheus(self):
        tmp = self.cluster.tmp.name
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files: [%s]\n"
                    "scrape_configs:\n"
                    "  - job_name: dhp-controller\n"
                    "    honor_labels: true\n"
                    "    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n"
                    % (json.dumps(os.path.abspath(ALERTS)), self.cluster.http_port))
        self.port = free_port()
        self.prom_log = open(os.path.join(tmp, "prometheus.log"), "ab")
        self.prometheus = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.prom_log, stderr=self.prom_log)

        def ready():
            if self.prometheus.poll() is not None:
                raise AssertionError("prometheus exited: " + self.prometheus_log())
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port,
                                            timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False
        wait_for(ready, timeout=60, interval=0.2, what="prometheus ready")

    def prometheus_log(self):
        with open(os.path.join(self.cluster.tmp.name, "prometheus.log"), "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def query(self, expr):
        """The instant query's result: [(labels, value)]; fails on an API error."""
        got = http_get_json("http://127.0.0.1:%d/api/v1/query?%s" % (
            self.port, urllib.parse.urlencode({"query": expr})))
        self.assertEqual(got.get("status"), "success", "%s: %s" % (expr, got))
        return [(r["metric"], float(r["value"][1])) for r in got["data"]["result"]]

    def wait_series(self, expr, what, timeout=60):
        return wait_for(lambda: self.query(expr), timeout=timeout, interval=0.5,
                        what="%s in Prometheus (%s)" % (what, expr))

    def test_prometheus_scrapes_the_job_and_stage_series_during_a_job(self):
        self.start_prometheus()
        self.cluster.start_worker(
            "node-a", cpu_slots=2,
            extra_args=["--rank-binary", RANK, "--data-root", DATA_ROOT, "--stop-grace-ms",
                        "3000", "--peak-tflops", "0.05"])
        wait_for(lambda: any(n["id"] == "node-a" and n.get("state") == "NODE_STATE_READY"
                             for n in self.cluster.dhpctl_json("nodes").get("nodes", [])),
                 timeout=20, what="node-a READY")
        code, out, err = self.cluster.dhpctl(
            "submit", "-f", runs_test.spec_text(self.cluster, "mon", steps=2000, every=10))
        self.assertEqual(code, 0, err + out)
        job = re.search(r"job (j-[0-9a-f]{13}) submitted", out).group(1)
        J = 'job="%s"' % job
        try:
            self.check_job_series(job, J)
            self.check_stage_series(job, J)
        except AssertionError:
            print(self.cluster.controller_log()[-3000:], file=sys.stderr)
            print(self.prometheus_log(), file=sys.stderr)
            raise
        finally:
            self.cluster.dhpctl("cancel", job)
            wait_for(lambda: runs_test.rank_pids(job) == [], timeout=60, what="ranks gone")

    def check_job_series(self, job, J):
        """Job, rank and cluster series, the rules, the dashboards' PromQL and dhpctl top."""
        # The job's series, stored by Prometheus and read back through its HTTP API.
        step = self.wait_series("dhp_job_step{%s} > 2" % J, "step > 2", timeout=240)
        self.assertEqual(len(step), 1, step)
        self.assertEqual(step[0][0]["job"], job)  # honor_labels: the dhp job id, not the scrape's
        self.assertGreater(step[0][1], 2)
        for name in ["dhp_job_loss", "dhp_job_tokens_per_second", "dhp_job_step_seconds",
                     "dhp_job_learning_rate", "dhp_job_grad_norm", "dhp_job_total_steps"]:
            (labels, value), = self.wait_series("%s{%s}" % (name, J), name)
            self.assertTrue(math.isfinite(value), (name, value))
            if name != "dhp_job_loss":
                self.assertGreater(value, 0, name)
        self.assertEqual(self.query("dhp_job_total_steps{%s}" % J)[0][1], 2000)
        self.assertEqual(self.query("dhp_job_restarts{%s}" % J)[0][1], 0)
        self.assertGreaterEqual(self.query("dhp_job_queue_wait_seconds{%s}" % J)[0][1], 0)
        self.assertEqual([m["state"] for m, _ in self.query("dhp_job_state{%s} == 1" % J)],
                         ["RUNNING"])
        age = self.query("time() - dhp_job_last_progress_timestamp_seconds{%s}" % J)[0][1]
        self.assertLess(age, 60)
        self.assertEqual(sorted(m["rank"] for m, _ in self.query("dhp_rank_step{%s}" % J)),
                         ["0", "1"])
        self.assertEqual(self.query('dhp_slots{kind="used"}')[0][1], 2)
        self.assertEqual(self.query('dhp_node_slots{node="node-a",kind="used"}')[0][1], 2)
        self.wait_series("dhp_checkpoint_size_bytes{%s} > 0" % J, "a complete checkpoint")
        self.assertGreater(self.query("dhp_checkpoint_write_seconds{%s}" % J)[0][1], 0)

        # Prometheus loaded the alerting rules and evaluates them without error.
        rules = http_get_json("http://127.0.0.1:%d/api/v1/rules" % self.port)
        self.assertEqual(rules["status"], "success")
        loaded = [r for g in rules["data"]["groups"] for r in g["rules"]]
        self.assertEqual(len(loaded), 8, loaded)
        def rules_ok():
            got = http_get_json("http://127.0.0.1:%d/api/v1/rules" % self.port)
            return all(r["health"] == "ok" for g in got["data"]["groups"] for r in g["rules"])
        wait_for(rules_ok, timeout=30, interval=0.5, what="every rule evaluated without error")
        self.assertEqual(self.query('ALERTS{alertname="DhpJobStalled"}'), [])

        # Every dashboard expression is valid PromQL, with the variables filled in.
        for where, expr in all_queries():
            lv = re.match(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", expr, re.S)
            if lv:
                expr = lv.group(1)
            expr = (expr.replace("$job", job).replace("$stage", "vision|text")
                    .replace("$rank", ".*").replace("$__rate_interval", "1m"))
            self.query(expr)  # fails on a parse error

        # dhpctl top shows the same live.
        code, out, err = self.cluster.dhpctl("top", job, "--once")
        self.assertEqual(code, 0, err)
        self.assertIn("job %s  mon  RUNNING" % job, out)
        self.assertRegex(out, r"(?m)^RANK +NODE +STAGES +STEP +TOK/S V/T +FWD ms")
        self.assertRegex(out, r"(?m)^0 +node-a +vision\+text +\d+ ")
        self.assertRegex(out, r"(?m)^1 +node-a +vision\+text +\d+ ")
        snapshot = json.loads(self.cluster.dhpctl("-o", "json", "top", job, "--once")[1])
        self.assertEqual(len(snapshot["ranks"]), 2)

    def check_stage_series(self, job, J):
        """Per stage and rank. These need the rank side (worker/rank) to send the ReportProgress
        metric keys vision_tokens_per_s, text_tokens_per_s, forward_s, backward_s, comm_s,
        optimizer_s, memory_rss_bytes and comm_bytes:<group>. tiny-cpu is vision SP 2 x text
        TP 2, collocated: both ranks host both stages."""
        tokens = self.wait_series("dhp_stage_tokens_per_second{%s}" % J, "stage tokens/s")
        self.assertEqual(sorted((m["stage"], m["rank"]) for m, _ in tokens),
                         [("text", "0"), ("text", "1"), ("vision", "0"), ("vision", "1")])
        for m, v in tokens:
            self.assertTrue(math.isfinite(v) and v > 0, (m, v))
        split = self.wait_series("dhp_stage_step_seconds{%s}" % J, "stage step split")
        self.assertEqual({m["phase"] for m, _ in split},
                         {"forward", "backward", "comm", "optimizer"})
        for m, v in split:
            self.assertTrue(math.isfinite(v) and v >= 0, (m, v))
        for phase in ["forward", "backward"]:
            self.assertTrue(all(v > 0 for m, v in split if m["phase"] == phase), split)
        rss = self.wait_series('dhp_stage_memory_bytes{%s, kind="rss"}' % J, "rss per rank")
        self.assertEqual(len(rss), 4, rss)
        self.assertTrue(all(v > 0 for _, v in rss), rss)
        # MFU: a CPU has no known peak, so the agent's --peak-tflops 0.05 gives one.
        mfu = self.wait_series("dhp_stage_mfu{%s}" % J, "MFU per stage and rank")
        self.assertEqual(sorted((m["stage"], m["rank"]) for m, _ in mfu),
                         [("text", "0"), ("text", "1"), ("vision", "0"), ("vision", "1")])
        self.assertTrue(all(math.isfinite(v) and v > 0 for _, v in mfu), mfu)
        coll = self.wait_series("dhp_collective_bytes{%s} > 0" % J, "collective bytes")
        self.assertTrue(any(m["group"].startswith("text.") for m, _ in coll), coll)
        got = self.query("max by (stage) (dhp_stage_tokens_per_second{%s})" % J)
        self.assertEqual(sorted(m["stage"] for m, _ in got), ["text", "vision"])
        # The stages over their ranks, which stay when the per-rank series go (more ranks
        # placed than metrics.rank_series_max_ranks; here 2 of 4096: they are on).
        self.assertEqual(self.query("dhp_metrics_rank_series")[0][1], 1)
        summary = self.wait_series("dhp_job_stage_tokens_per_second{%s}" % J, "stage summary")
        self.assertEqual(sorted(m["stage"] for m, _ in summary), ["text", "vision"])
        self.assertTrue(all(math.isfinite(v) and v > 0 for _, v in summary), summary)
        phases = self.wait_series('dhp_job_stage_step_seconds{%s,phase="forward"}' % J,
                                  "the stages' slowest forward")
        self.assertEqual(len(phases), 2, phases)
        self.assertTrue(all(v > 0 for _, v in phases), phases)
        (_, ratio), = self.wait_series("dhp_job_memory_used_ratio{%s}" % J, "memory ratio")
        self.assertTrue(0 < ratio < 1, ratio)  # rss over the node's memory per CPU slot
        self.assertEqual(len(self.wait_series("dhp_job_stage_mfu{%s}" % J, "stage MFU")), 2)
        code, out, err = self.cluster.dhpctl("top", job, "--once")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"(?m)^0 +node-a +vision\+text +\d+ +[0-9.]+[kMG]?/[0-9.]+[kMG]? +"
                              r"[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +\d+ rss +"
                              r"[0-9.]+%/[0-9.]+% ")


if __name__ == "__main__":
    BINS = Binaries(*sys.argv[1:5])
    RANK = os.path.abspath(sys.argv[5])
    runs_test.GEN_SHAPES = os.path.abspath(sys.argv[6])
    data_tmp = tempfile.TemporaryDirectory(prefix="dhp-monitoring-data-")
    DATA_ROOT = data_tmp.name
    runs_test.generate_dataset(DATA_ROOT)
    unittest.main(argv=[sys.argv[0]] + sys.argv[7:])
