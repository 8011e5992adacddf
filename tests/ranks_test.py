"""Multi-process tests of dhp-rank as dhp-worker starts it (--job --attempt --world-rank
--world-size --device --data-root): the ranks fetch a submitted job from a real dhp-controller,
bootstrap their Gloo process groups through its rendezvous KV and train the tiny model (vision
SP 2 x text TP 2, collocated) on a generated shapes dataset.

No agent runs here, so the controller does not run the job (it stays QUEUED): the ranks are
started by tools/launch_ranks.sh, and the controller answers their progress reports with
stop=true, which every rank must obey after the same step. Training a job to its end, its
checkpoints and resuming are covered where the agent launches the ranks (runs_test.py) and
in-process (worker/rank/job_rank_test.cc).
Usage: ranks_test.py CONTROLLER WORKER DHPCTL CONFIGS_DIR DHP_RANK LAUNCHER GEN_SHAPES
HF_MODEL_DIR [unittest args]."""

import os
import re
import shutil
import subprocess
import sys
import unittest

from dhp_cluster import Binaries, Cluster

BINS = None
DHP_RANK = None
LAUNCHER = None
GEN_SHAPES = None
HF_MODEL = None  # a Hugging Face model directory (worker/rank/testdata/hf_golden)
STEPS = 200  # more than the ranks get to: the controller stops them


class RanksTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(BINS)
        self.cluster.start_controller()
        # tiny-cpu.yaml's registry expects <data root>/data/shapes/train.jsonl.
        self.data_root = os.path.join(self.cluster.tmp.name, "root")
        subprocess.run([GEN_SHAPES, "--out", os.path.join(self.data_root, "data", "shapes"),
                        "--count", "24", "--size", "56"], check=True, capture_output=True)
        with open(self.cluster.config("tiny-cpu.yaml")) as f:
            spec = f.read()
        spec = re.sub(r"(?m)^  max_steps: .*$", "  max_steps: %d" % STEPS, spec)
        spec = re.sub(r"(?m)^  every_steps: .*$", "  every_steps: 0", spec)
        path = os.path.join(self.cluster.tmp.name, "tiny-short.yaml")
        with open(path, "w") as f:
            f.write(spec)
        code, out, err = self.cluster.dhpctl("submit", "-f", path)
        self.assertEqual(code, 0, err)
        self.job = re.match(r"job (j-[0-9a-f]+) ", out).group(1)
        self.env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OPENBLAS_NUM_THREADS="1")

    def tearDown(self):
        self.cluster.close()

    def rank(self, *args, world_size=2, timeout=120):
        """Runs one dhp-rank with the agent's flags; returns the finished process."""
        return subprocess.run(
            [DHP_RANK, "--controller", self.cluster.server, "--job", self.job,
             "--world-size", str(world_size), "--device", "cpu", "--data-root", self.data_root]
            + list(args), capture_output=True, text=True, timeout=timeout, env=self.env)

    def test_ranks_train_on_real_data_and_stop_together_when_told(self):
        env = dict(self.env, DHP_RANK_BIN=DHP_RANK, DHPCTL_BIN=BINS.dhpctl)
        proc = subprocess.run(
            [LAUNCHER, "--controller", self.cluster.server, "--job", self.job,
             "--data-root", self.data_root],
            capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("launching 2 ranks", proc.stdout)  # the world size came from the spec
        self.assertIn("all 2 ranks finished", proc.stdout)
        lines = re.findall(
            r"(?m)^rank (\d): step (\d+)/(\d+) loss (\S+) lr (\S+) grad_norm (\S+) "
            r"tokens_per_s (\S+) step_s (\S+)$", proc.stdout)
        by_step = {}
        for rank, step, total, loss, *_ in lines:
            self.assertEqual(total, str(STEPS))
            by_step.setdefault(int(step), {})[rank] = loss
        last = max(by_step, default=0)
        # Both ranks trained the same steps and stopped after the same one, well before the end.
        self.assertEqual(sorted(by_step), list(range(1, last + 1)), proc.stdout)
        self.assertTrue(1 <= last < STEPS, proc.stdout)
        for step, losses in by_step.items():
            # Both ranks host a text role; they print the same global loss, all 17 digits.
            self.assertEqual(sorted(losses), ["0", "1"], proc.stdout)
            self.assertEqual(len(set(losses.values())), 1, "ranks disagree at step %d" % step)
            self.assertTrue(0 < float(losses["0"]) < 20, losses)
        print("the ranks stopped after step %d of %d" % (last, STEPS))

    def submit_model_dir(self, preset_line):
        """Submits tiny-cpu.yaml with its model given by a Hugging Face model directory under the
        data root (config.json, model.safetensors, and the tiny tokenizer as tokenizer.json)."""
        model = os.path.join(self.data_root, "hf-model")
        shutil.copytree(HF_MODEL, model)
        shutil.copy(self.cluster.config("tiny-tokenizer.json"),
                    os.path.join(model, "tokenizer.json"))
        with open(os.path.join(self.cluster.tmp.name, "tiny-short.yaml")) as f:
            spec = f.read()
        spec = re.sub(r"(?m)^  preset: tiny.*$", preset_line + "  weights_path: hf-model", spec)
        spec = re.sub(r"(?m)^name: .*$", "name: hf-model", spec)
        path = os.path.join(self.cluster.tmp.name, "hf-model.yaml")
        with open(path, "w") as f:
            f.write(spec)
        code, out, err = self.cluster.dhpctl("submit", "-f", path)
        self.assertEqual(code, 0, err)  # the controller cannot read the directory: accepted
        return re.match(r"job (j-[0-9a-f]+) ", out).group(1)

    def test_a_model_directory_without_a_preset_trains(self):
        job = self.submit_model_dir("")
        env = dict(self.env, DHP_RANK_BIN=DHP_RANK, DHPCTL_BIN=BINS.dhpctl)
        proc = subprocess.run(
            [LAUNCHER, "--controller", self.cluster.server, "--job", job,
             "--data-root", self.data_root],
            capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        losses = re.findall(r"(?m)^rank (\d): step 1/\d+ loss (\S+) ", proc.stdout)
        self.assertEqual(sorted(r for r, _ in losses), ["0", "1"], proc.stdout)
        self.assertEqual(losses[0][1], losses[1][1])
        # The saved random init (vocabulary 1024) predicts about uniformly: log(1024) = 6.93.
        self.assertAlmostEqual(float(losses[0][1]), 6.93, delta=0.5)

    def test_a_preset_that_disagrees_with_the_model_directory_is_refused_by_the_ranks(self):
        self.job = self.submit_model_dir("  preset: qwen2_5_vl_3b\n")
        proc = self.rank("--world-rank", "0", "--timeout", "3")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn('model.preset: qwen2_5_vl_3b disagrees with model.weights_path "hf-model"\'s '
                      "config.json: vision.depth: 32 vs 2", proc.stderr)

    def test_spec_data_paths_outside_the_data_roots_are_refused(self):
        outside = os.path.join(self.cluster.tmp.name, "elsewhere")
        shutil.copytree(os.path.join(self.data_root, "data", "shapes"), outside)
        with open(os.path.join(self.cluster.tmp.name, "tiny-short.yaml")) as f:
            spec = f.read()
        spec = spec.replace("annotation_path: data/shapes/train.jsonl",
                            "annotation_path: " + os.path.join(outside, "train.jsonl"))
        path = os.path.join(self.cluster.tmp.name, "outside.yaml")
        with open(path, "w") as f:
            f.write(spec)
        code, out, err = self.cluster.dhpctl("submit", "-f", path)
        self.assertEqual(code, 0, err)  # the controller cannot know the nodes' roots
        self.job = re.match(r"job (j-[0-9a-f]+) ", out).group(1)
        proc = self.rank("--world-rank", "0", "--timeout", "3")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn('rank 0: data.registry.shapes.annotation_path: "%s/train.jsonl" resolves '
                      "to %s/train.jsonl, outside this node's data roots (%s)"
                      % (outside, os.path.realpath(outside), os.path.realpath(self.data_root)),
                      proc.stderr)
        # Allowed by the agent's flags, the rank goes on (to wait for its peer).
        for flags in (["--allow-data-root", outside], ["--allow-any-data-path"]):
            proc = self.rank("--world-rank", "0", "--timeout", "3", *flags)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertNotIn("data roots", proc.stderr)
            self.assertIn("did not arrive within 3000 ms", proc.stderr)
        # A root that is empty or does not exist is refused at start, by the rank and the agent.
        for root in ("", os.path.join(outside, "missing")):
            proc = self.rank("--world-rank", "0", "--allow-data-root", root)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn("--allow-data-root", proc.stderr)
            agent = subprocess.run([BINS.worker, "--allow-data-root", root],
                                   capture_output=True, text=True, timeout=30)
            self.assertNotEqual(agent.returncode, 0, agent.stderr)
            self.assertIn("--allow-data-root", agent.stderr)

    def test_a_rank_that_never_arrives_is_named(self):
        proc = self.rank("--world-rank", "0", "--timeout", "3")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertRegex(proc.stderr,
                         r"rank 0: process groups: .*group world \(also vision, text, vision.sp0, "
                         r"text.tp0\) \(size 2\): rank 1 \(world rank 1\) did not arrive within "
                         r"3000 ms")

    def test_a_missing_attempt_is_refused(self):
        proc = self.rank("--attempt", "2", "--world-rank", "0", "--timeout", "3")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("rank 0: GetJob %s: NOT_FOUND: job %s has no attempt 2 (current: 1)"
                      % (self.job, self.job), proc.stderr)

    def test_a_world_size_that_does_not_match_the_layout_is_refused(self):
        proc = self.rank("--world-rank", "0", "--timeout", "3", world_size=3)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("rank 0: --world-size 3 does not match the job's layout (vision 2 (sp) x "
                      "text 2 x dp 1, collocated), which has 2 ranks", proc.stderr)

    def test_bad_usage_exits_2(self):
        proc = subprocess.run([DHP_RANK, "--job", self.job], capture_output=True, text=True,
                              timeout=30)
        self.assertEqual(proc.returncode, 2, proc.stderr)


if __name__ == "__main__":
    BINS = Binaries(*sys.argv[1:5])
    DHP_RANK, LAUNCHER, GEN_SHAPES, HF_MODEL = (os.path.abspath(p) for p in sys.argv[5:9])
    unittest.main(argv=[sys.argv[0]] + sys.argv[9:], verbosity=2)
