#!/usr/bin/env python3
"""A real job's checkpoint, exported as a Hugging Face model directory, in transformers (issue 15).

The job: a real dhp-controller and one dhp-worker agent, which launches two dhp-rank processes
(configs/tiny-cpu.yaml's layout: vision Ulysses SP 2 x text TP 2, collocated) that train STEPS
steps on a generated shapes dataset from a model directory alone: model.weights_path names a
tiny random Qwen2_5_VLForConditionalGeneration that transformers saved (save_pretrained: the
tiny preset's architecture, config.json, model.safetensors, generation_config.json) with the
tiny tokenizer as tokenizer.json and a preprocessor_config.json beside it. Its final checkpoint
(one shard per rank) is exported by `dhp-ckpt export` and by `dhpctl export`:

  fp32     --hf-dir, --max-shard-size 200KB (so: shards and an index): transformers'
           from_pretrained reports no missing, unexpected or mismatched keys; transformers'
           outputs on a packed batch (tests/hf_model_parity.py's write_reference: logits, loss,
           every gradient, an AdamW step) equal dhp's computed from the same directory by
           dhp-hf-parity, element by element within its fp32 bounds; the tokenizer files and
           generation_config.json are the model directory's, byte for byte;
  single   -o FILE: every parameter of the fp32 directory equals the single file's exactly;
  bf16     --hf-dir --dtype bf16: every tensor is bf16 and equals the fp32 export rounded to
           bf16; config.json says torch_dtype bfloat16;
  preset   --hf-dir --spec naming the tiny preset instead of the model directory: config.json
           written from the preset; transformers loads it with no key missing and its logits
           equal those of the fp32 directory (the copied config.json) exactly;
  dhpctl   `dhpctl export JOB --out DIR` (newest COMPLETE checkpoint resolved through the API,
           dhp-ckpt run as a child): the same files, byte for byte, as the fp32 export; and its
           errors: an unknown job, an unknown checkpoint id, no dhp-ckpt, a non-empty --out.

Usage: hf_export_test.py CONTROLLER WORKER DHPCTL CONFIGS_DIR DHP_RANK DHP_CKPT DHP_HF_PARITY
GEN_SHAPES [unittest args]. Needs .venv (torch, transformers, safetensors)."""

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

import torch
from safetensors import safe_open
from transformers import Qwen2_5_VLForConditionalGeneration

from dhp_cluster import Binaries, Cluster, wait_for
import hf_model_parity as hfp

BINS = None
DHP_RANK = DHP_CKPT = DHP_HF_PARITY = GEN_SHAPES = None

STEPS = 3
THREADS = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "OPENBLAS_NUM_THREADS": "1"}
# The tiny preset's architecture (common/model_presets.cc), as a transformers config.
TINY_TEXT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, mrope_section=[2, 3, 3],
                 vocab_size=1024, max_position_embeddings=4096)
TINY_VISION = dict(depth=4, hidden_size=64, num_heads=4, intermediate_size=128, window_size=112,
                   fullatt_block_indexes=[1, 3])
SAMPLES = [[(1, 6, 8)], [], [(1, 4, 4), (1, 2, 6)]]  # image grids of a packed batch
PREPROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14,
                "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 3136,
                "max_pixels": 50176}


def load_dir(path):
    """{name: tensor} of a model directory (model.safetensors or the shards of its index)."""
    index = os.path.join(path, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for name in files:
        with safe_open(os.path.join(path, name), "pt") as f:
            for key in f.keys():
                out[key] = f.get_tensor(key)
    return out


def from_pretrained(path):
    model, info = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        path, attn_implementation="eager", dtype=torch.float32, output_loading_info=True)
    return model, info


def logits_of(model):
    """transformers' logits of one sample with an image (fixed inputs)."""
    gen = torch.Generator().manual_seed(5)
    ids, _ = hfp.make_sample([(1, 6, 8)], gen)
    pixels = torch.randn(48, hfp.PATCH_DIM, generator=gen)
    with torch.no_grad():
        return model(input_ids=ids[None], use_cache=False, pixel_values=pixels,
                     image_grid_thw=torch.tensor([[1, 6, 8]]),
                     mm_token_type_ids=(ids == hfp.IMAGE_PAD).int()[None]).logits


class HfExportTest(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(BINS, heartbeat_timeout_ms=5000, heartbeat_interval_ms=200)
        self.tmp = self.cluster.tmp.name
        self.root = os.path.join(self.tmp, "root")  # the agent's --data-root
        # Exports on the controller (dhpctl export --on-controller) run this dhp-ckpt, with the
        # agents' data root for the model directory's tokenizer and preprocessor files.
        self.cluster.start_controller(extra_args=["--export-dhp-ckpt", DHP_CKPT,
                                                  "--export-data-root", self.root])
        self.out = os.path.join(self.tmp, "out")
        os.makedirs(self.out)
        subprocess.run([GEN_SHAPES, "--out", os.path.join(self.root, "data", "shapes"),
                        "--count", "16", "--size", "56"], check=True, capture_output=True)
        self.model_dir = os.path.join(self.root, "models", "tiny-hf")
        torch.manual_seed(11)
        model = Qwen2_5_VLForConditionalGeneration(
            hfp.make_config(TINY_TEXT, TINY_VISION, False)).float()
        model.save_pretrained(self.model_dir)
        shutil.copy(self.cluster.config("tiny-tokenizer.json"),
                    os.path.join(self.model_dir, "tokenizer.json"))
        with open(os.path.join(self.model_dir, "preprocessor_config.json"), "w") as f:
            json.dump(PREPROCESSOR, f, indent=1)

    def tearDown(self):
        self.cluster.close()

    def spec(self, weights_path):
        with open(self.cluster.config("tiny-cpu.yaml")) as f:
            text = f.read()
        model = "  weights_path: %s  #" % weights_path if weights_path else "  preset: tiny  #"
        for key, value in [("name", "hf-export"), ("max_steps", STEPS), ("warmup_steps", 0),
                           ("every_steps", 0), ("directory", "hf-export"), ("preset", None)]:
            pattern, repl = r"(?m)^(\s*%s:) [^#\n]*" % key, r"\g<1> %s " % value
            if value is None:
                pattern, repl = r"(?m)^  preset: .*$", model
            text, n = re.subn(pattern, repl, text)
            self.assertEqual(n, 1, key)
        path = os.path.join(self.tmp, "%s.yaml" % ("model-dir" if weights_path else "preset"))
        with open(path, "w") as f:
            f.write(text)
        return path

    def train(self):
        """Runs the job from the model directory; returns (job id, final checkpoint's dir)."""
        self.cluster.start_worker("node-a", cpu_slots=2, env=THREADS, extra_args=[
            "--rank-binary", DHP_RANK, "--data-root", self.root])
        wait_for(lambda: any(n.get("state") == "NODE_STATE_READY"
                             for n in self.cluster.dhpctl_json("nodes").get("nodes", [])),
                 timeout=30, what="node-a READY")
        job, state, got = self.cluster.run_job(self.spec("models/tiny-hf"))
        self.assertEqual(state, "JOB_STATE_SUCCEEDED",
                         json.dumps(got, indent=1) + self.cluster.controller_log()[-3000:])
        ckpt = [c for c in got["checkpoints"] if int(c["step"]) == STEPS]
        self.assertEqual(len(ckpt), 1, got.get("checkpoints"))
        self.assertEqual(ckpt[0]["state"], "CHECKPOINT_STATE_COMPLETE")
        path = ckpt[0]["path"]
        wait_for(lambda: os.path.exists(os.path.join(path, "manifest.json")), timeout=20,
                 what="the manifest")
        return job, path

    def ckpt(self, *args, expect=0):
        proc = subprocess.run([DHP_CKPT, "export"] + list(args), capture_output=True, text=True,
                              timeout=120)
        self.assertEqual(proc.returncode, expect, proc.stdout + proc.stderr)
        return proc.stdout + proc.stderr

    def test_exported_directory_loads_in_transformers_with_dhps_logits(self):
        job, ckpt_dir = self.train()
        fp32, single = os.path.join(self.out, "fp32"), os.path.join(self.out, "single.safetensors")
        bf16, preset = os.path.join(self.out, "bf16"), os.path.join(self.out, "preset")
        root = ["--data-root", self.root]
        summary = self.ckpt(ckpt_dir, "--hf-dir", fp32, "--dtype", "fp32",
                            "--max-shard-size", "200KB", *root)
        self.assertIn("exported step %d of job %s" % (STEPS, job), summary)
        self.assertIn("copied from the model directory: tokenizer.json, "
                      "preprocessor_config.json, generation_config.json", summary)
        self.ckpt(ckpt_dir, "-o", single, "--dtype", "fp32", *root)
        self.ckpt(ckpt_dir, "--hf-dir", bf16, "--dtype", "bf16", *root)
        self.ckpt(ckpt_dir, "--hf-dir", preset, "--spec", self.spec(None), *root)
        self.assertIn("exactly one of -o FILE and --hf-dir DIR",
                      self.ckpt(ckpt_dir, "-o", single + "2", "--hf-dir", fp32 + "2", expect=2))
        self.assertIn("is not empty", self.ckpt(ckpt_dir, "--hf-dir", fp32, *root, expect=1))

        # The fp32 directory: shards with an index, the model directory's files byte for byte.
        files = sorted(os.listdir(fp32))
        shards = [f for f in files if re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f)]
        self.assertGreater(len(shards), 2, files)
        self.assertEqual(files, sorted(shards + [
            "config.json", "model.safetensors.index.json", "tokenizer.json",
            "preprocessor_config.json", "generation_config.json"]))
        for name in ("tokenizer.json", "preprocessor_config.json", "generation_config.json"):
            self.assertTrue(filecmp.cmp(os.path.join(self.model_dir, name),
                                        os.path.join(fp32, name), shallow=False), name)
        with open(os.path.join(fp32, "config.json")) as f:
            self.assertEqual(json.load(f)["dtype"], "float32")
        with open(os.path.join(preset, "config.json")) as f:
            self.assertEqual(json.load(f)["torch_dtype"], "float32")

        # (c) the directory holds exactly the single file's parameters.
        params = load_dir(fp32)
        with safe_open(single, "pt") as f:
            self.assertEqual(sorted(params), sorted(f.keys()))
            for name in f.keys():
                self.assertTrue(torch.equal(params[name], f.get_tensor(name)), name)
        # The checkpoint trained: its parameters are not the model directory's any more.
        start = load_dir(self.model_dir)
        moved = max(float((params[n] - start[n]).abs().max()) for n in params)
        self.assertGreater(moved, 1e-4)

        # (d) bf16: every tensor bf16, the fp32 export rounded.
        low = load_dir(bf16)
        self.assertEqual(sorted(low), sorted(params))
        for name, t in low.items():
            self.assertEqual(t.dtype, torch.bfloat16, name)
            self.assertTrue(torch.equal(t, params[name].to(torch.bfloat16)), name)
        with open(os.path.join(bf16, "config.json")) as f:
            self.assertEqual(json.load(f)["dtype"], "bfloat16")

        # (a) transformers loads both directories with every key present and used.
        model, info = from_pretrained(fp32)
        preset_model, preset_info = from_pretrained(preset)
        for what, i in (("fp32", info), ("preset", preset_info)):
            for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
                self.assertEqual(len(i[key]), 0, "%s: %s %s" % (what, key, i[key]))
        loaded = {hfp.checkpoint_name(n): p for n, p in model.named_parameters()}
        self.assertEqual(sorted(loaded), sorted(params))
        for name, p in loaded.items():
            self.assertTrue(torch.equal(p.detach(), params[name]), name)
        preset_logits, model_logits = logits_of(preset_model), logits_of(model)
        self.assertTrue(torch.equal(preset_logits, model_logits),
                        float((preset_logits - model_logits).abs().max()))

        # (b) transformers' outputs vs dhp's on the same directory (dhp-hf-parity's bounds).
        loss, n = hfp.write_reference(model, fp32, SAMPLES, seed=3)
        proc = subprocess.run([DHP_HF_PARITY, fp32], capture_output=True, text=True,
                              timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("1 of 1 cases within bounds", proc.stdout)
        lines = proc.stdout.splitlines()
        logits_row = [line for line in lines if line.strip().startswith("logits")]
        self.assertEqual(len(logits_row), 1, proc.stdout)
        table = [line.strip() for line in lines if "loss dhp" in line or
                 line.strip().startswith(("quantity", "logits", "loss "))]
        os.remove(os.path.join(fp32, "reference.safetensors"))

        # dhpctl export: the newest COMPLETE checkpoint through the API, then dhp-ckpt.
        via = os.path.join(self.out, "via-dhpctl")
        code, out, err = self.cluster.dhpctl(
            "export", job, "--out", via, "--dtype", "fp32", "--max-shard-size", "200KB",
            "--dhp-ckpt", DHP_CKPT, *root, timeout=120)
        self.assertEqual(code, 0, out + err)
        self.assertIn("exporting checkpoint", err)
        self.assertIn(ckpt_dir, err)
        self.assertEqual(sorted(os.listdir(via)), files)
        for name in files:
            self.assertTrue(filecmp.cmp(os.path.join(fp32, name), os.path.join(via, name),
                                        shallow=False), name)
        code, out, err = self.cluster.dhpctl("export", "j-nosuchjob", "--out", via + "2",
                                             "--dhp-ckpt", DHP_CKPT)
        self.assertEqual(code, 1, out + err)
        self.assertIn("NOT_FOUND", err)
        code, out, err = self.cluster.dhpctl("export", job, "--checkpoint", "999", "--out",
                                             via + "2", "--dhp-ckpt", DHP_CKPT)
        self.assertEqual(code, 1, out + err)
        self.assertIn("job %s has no checkpoint 999: it has " % job, err)
        code, out, err = self.cluster.dhpctl("export", job, "--out", via + "2", "--dhp-ckpt",
                                             os.path.join(self.tmp, "no-dhp-ckpt"))
        self.assertEqual(code, 2, out + err)
        self.assertIn("is not an executable file", err)
        code, out, err = self.cluster.dhpctl("export", job, "--out", via, "--dhp-ckpt", DHP_CKPT,
                                             *root, timeout=120)
        self.assertEqual(code, 1, out + err)
        self.assertIn("is not empty", err)
        self.assertFalse(os.path.exists(via + "2"))

        # dhpctl export --on-controller: the controller runs dhp-ckpt where the checkpoint
        # lives, into <data dir>/exports/<id>; byte for byte a local export with the same
        # options (dhp-ckpt's default shard size, fp32).
        local = os.path.join(self.out, "via-dhpctl-local")
        code, out, err = self.cluster.dhpctl("export", job, "--out", local, "--dtype", "fp32",
                                             "--dhp-ckpt", DHP_CKPT, *root, timeout=120)
        self.assertEqual(code, 0, out + err)
        code, out, err = self.cluster.dhpctl("export", job, "--on-controller", "--dtype", "fp32",
                                             "--wait", "-o", "json", timeout=180)
        self.assertEqual(code, 0, out + err + self.cluster.controller_log()[-3000:])
        exported = json.loads(out)["export"]
        self.assertEqual(exported["state"], "EXPORT_STATE_SUCCEEDED", exported)
        self.assertEqual((exported["job_id"], exported["dtype"]), (job, "fp32"))
        served = exported["out_dir"]
        self.assertEqual(os.path.dirname(served),
                         os.path.abspath(os.path.join(self.cluster.data_dir, "exports")))
        self.assertEqual(sorted(os.listdir(served)), sorted(os.listdir(local)))
        self.assertIn("tokenizer.json", os.listdir(served))
        for name in os.listdir(local):
            self.assertTrue(filecmp.cmp(os.path.join(local, name), os.path.join(served, name),
                                        shallow=False), name)
        code, out, err = self.cluster.dhpctl("export-status", exported["id"])
        self.assertEqual(code, 0, out + err)
        self.assertIn("SUCCEEDED -> " + served, out)
        code, out, err = self.cluster.dhpctl("exports", job)
        self.assertEqual(code, 0, out + err)
        self.assertIn(exported["id"], out)
        code, out, err = self.cluster.dhpctl("export", job, "--on-controller", "--dtype", "fp64")
        self.assertEqual(code, 2, out + err)  # refused by dhpctl's own check

        print("\nexport of a SP 2 x TP 2 checkpoint (step %d, %d tensors, %d shards of <= 200 KB)"
              "\n  transformers from_pretrained: no missing/unexpected keys (copied and preset "
              "config.json)\n  dhp-hf-parity vs transformers (loss %.6f, %d parameters):\n  %s"
              "\n  parameters moved by training: max |diff| %.3e"
              % (STEPS, len(params), len(shards), loss, n, "\n  ".join(table), moved))


if __name__ == "__main__":
    BINS = Binaries(*sys.argv[1:5])
    DHP_RANK, DHP_CKPT, DHP_HF_PARITY, GEN_SHAPES = (os.path.abspath(p) for p in sys.argv[5:9])
    unittest.main(argv=[sys.argv[0]] + sys.argv[9:], verbosity=2)
