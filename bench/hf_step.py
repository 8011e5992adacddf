#!/usr/bin/env python3
"""One training step of dhp's single-rank model against Hugging Face transformers' eager model,
side by side in one run, with the same config, weights, batch and thread count.

  .venv/bin/python bench/hf_step.py build/cmake/worker/rank/dhp-hf-parity [--threads N]

Use the CMake build's binary: it runs on the same LibTorch (the .venv wheel) as transformers.
For each config, a random Qwen2_5_VLForConditionalGeneration is saved with save_pretrained, with
one packed sample (text, an image, text) as its batch. transformers times forward with the loss,
backward, and clip_grad_norm_ + torch.optim.AdamW(fused=True) on dhp's two parameter groups
(the fused kernel is what transformers' Trainer picks by default with torch 2.8+:
optim="adamw_torch_fused"); dhp-hf-parity --bench times the same three phases (TimeHfStep).
Both report the median of the timed steps after one warm-up step. Each config runs in fp32 and
in bf16 autocast on the CPU (torch.autocast("cpu", torch.bfloat16) around forward and loss;
dhp: --bf16, the CPU autocast dhp-train uses for a bf16 stage); weights, gradients and optimizer
state stay fp32 in both. Writes bench/results/hf_step.md and .json.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from hf_model_parity import (IMAGE_PAD, OPTIM, PATCH_DIM, VIDEO_PAD, VISION_END,  # noqa: E402
                             VISION_START, checkpoint_name, uses_weight_decay)

# name -> (text config, vision config, image grid, text tokens, timed steps)
CONFIGS = {
    "tiny": (
        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, vocab_size=1100, mrope_section=[2, 3, 3]),
        dict(depth=4, hidden_size=64, num_heads=4, intermediate_size=128,
             fullatt_block_indexes=[1, 3]),
        (1, 16, 16), 192, 7),
    "~140 M": (
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
             intermediate_size=2048, vocab_size=32000, mrope_section=[8, 12, 12]),
        dict(depth=6, hidden_size=384, num_heads=6, intermediate_size=1024,
             fullatt_block_indexes=[2, 5]),
        (1, 32, 32), 768, 3),
}


def make_case(out_dir, text, vision, grid, n_text, seed=0):
    text = dict(text)
    section = text.pop("mrope_section")
    text["rope_parameters"] = dict(rope_type="default", mrope_section=section, rope_theta=1e6)
    text.update(bos_token_id=1000, eos_token_id=1002, rms_norm_eps=1e-6)
    cfg = Qwen2_5_VLConfig(
        text_config=text, vision_config=dict(vision, out_hidden_size=text["hidden_size"]),
        image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END)
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(cfg).float()
    model.config._attn_implementation = "eager"
    model.save_pretrained(out_dir, safe_serialization=True)
    t, h, w = grid
    gen = torch.Generator().manual_seed(seed + 1)
    half = n_text // 2
    ids = torch.cat([torch.randint(0, 1000, (half,), generator=gen),
                     torch.tensor([VISION_START] + [IMAGE_PAD] * (t * h * w // 4) + [VISION_END]),
                     torch.randint(0, 1000, (n_text - half,), generator=gen)])
    labels = ids.clone()
    labels[ids == IMAGE_PAD] = -100
    batch = dict(input_ids=ids, labels=labels,
                 cu_seqlens=torch.tensor([0, len(ids)], dtype=torch.int64),
                 pixel_values=torch.randn(t * h * w, PATCH_DIM, generator=gen),
                 image_grid_thw=torch.tensor([grid], dtype=torch.int64))
    save_file(batch, os.path.join(out_dir, "reference.safetensors"))
    return model, batch


def time_hf(model, batch, steps, bf16):
    params = {checkpoint_name(n): p for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in params.items() if uses_weight_decay(n, p)],
          "weight_decay": 0.0},
         {"params": [p for n, p in params.items() if not uses_weight_decay(n, p)],
          "weight_decay": 0.0}],
        lr=1e-3, betas=(OPTIM["beta1"], OPTIM["beta2"]), eps=OPTIM["eps"], fused=True)
    ids, labels = batch["input_ids"], batch["labels"]
    kwargs = dict(input_ids=ids[None], use_cache=False, pixel_values=batch["pixel_values"],
                  image_grid_thw=batch["image_grid_thw"],
                  mm_token_type_ids=(ids == IMAGE_PAD).int()[None])
    model.train()
    rows = []
    for i in range(steps + 1):
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(**kwargs).logits[0]
            loss = F.cross_entropy(logits[:-1].float(), labels[1:], ignore_index=-100)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        t3 = time.perf_counter()
        if i > 0:
            rows.append([(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3])
    rows.sort(key=sum)
    return rows[len(rows) // 2]


def time_dhp(binary, case_dir, steps, threads, bf16):
    out = subprocess.run([binary, "--bench", str(steps), "--threads", str(threads)]
                         + (["--bf16"] if bf16 else []) + [case_dir],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"forward (\S+) ms backward (\S+) ms optimizer (\S+) ms", out)
    if not m:
        sys.exit("unexpected output of %s: %s" % (binary, out))
    return [float(v) for v in m.groups()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary", help="dhp-hf-parity (the CMake build's, on the same LibTorch)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for name, (text, vision, grid, n_text, full_steps) in CONFIGS.items():
        with tempfile.TemporaryDirectory(prefix="dhp-hf-step-") as d:
            model, batch = make_case(d, text, vision, grid, n_text)
            n_params = sum(p.numel() for p in model.parameters())
            # bf16 at ~140 M is left out: on a CPU without bf16 instructions transformers' warm-up
            # and one timed step took over 11 minutes (interrupted) in the run of 2026-11-23.
            for dtype in ("fp32", "bf16") if n_params < 50e6 else ("fp32",):
                bf16 = dtype == "bf16"
                steps = full_steps
                binary = os.path.abspath(args.binary)
                # Alternate the two so that machine noise hits both alike.
                hf = time_hf(model, batch, steps, bf16)
                dhp = time_dhp(binary, d, steps, args.threads, bf16)
                hf = min(hf, time_hf(model, batch, steps, bf16), key=sum)
                dhp = min(dhp, time_dhp(binary, d, steps, args.threads, bf16), key=sum)
                results.append(dict(config=name, dtype=dtype, parameters=n_params, steps=steps,
                                    tokens=len(batch["input_ids"]), hf_ms=hf, dhp_ms=dhp,
                                    ratio=sum(hf) / sum(dhp)))
                print("%-10s %s hf %8.1f ms  dhp %8.1f ms  hf/dhp %.2f"
                      % (name, dtype, sum(hf), sum(dhp), sum(hf) / sum(dhp)), flush=True)
    write(args, results)


def write(args, results):
    head = ("| config | dtype | params | tokens | timed steps | transformers fwd / bwd / opt (ms) "
            "| dhp fwd / bwd / opt (ms) | transformers total | dhp total | transformers / dhp |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    fmt = lambda r: " / ".join("%.1f" % v for v in r)  # noqa: E731
    rows = "".join(
        "| %s | %s | %.1f M | %d | %d | %s | %s | %.1f ms | %.1f ms | %.2f |\n"
        % (r["config"], r["dtype"], r["parameters"] / 1e6, r["tokens"], r["steps"],
           fmt(r["hf_ms"]), fmt(r["dhp_ms"]), sum(r["hf_ms"]), sum(r["dhp_ms"]), r["ratio"])
        for r in results)
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
    bf16_isa = [f for f in ("avx512_bf16", "amx_bf16") if f in flags] or ["none"]
    env = ("torch %s, transformers %s, on the CPU, %d threads, %s (bf16 instructions: %s); "
           "median of the timed steps after one warm-up, the better of two alternating rounds"
           % (torch.__version__, transformers.__version__, args.threads, platform.processor()
              or platform.machine(), ", ".join(bf16_isa)))
    where = "".join(
        "- %s %s: dhp's step is %.0f%% forward, %.0f%% backward, %.0f%% optimizer (transformers: "
        "%.0f%% / %.0f%% / %.0f%%).\n"
        % ((r["config"], r["dtype"]) + tuple(100 * v / sum(r["dhp_ms"]) for v in r["dhp_ms"])
           + tuple(100 * v / sum(r["hf_ms"]) for v in r["hf_ms"])) for r in results)
    for phase, i in (("forward", 0), ("backward", 1), ("optimizer", 2)):
        slower = ["%s %s" % (r["config"], r["dtype"]) for r in results
                  if r["dhp_ms"][i] > r["hf_ms"][i]]
        if slower:
            where += "- dhp's %s phase is slower on: %s.\n" % (phase, ", ".join(slower))
    where += ("- bf16 on the CPU is autocast on both sides (matmuls in bf16, weights fp32). On a CPU "
              "without bf16 instructions both are slower than fp32: LibTorch converts to and from "
              "bf16 around each matmul. No ~140 M bf16 row: transformers' bf16 warm-up step plus "
              "one timed step did not finish in 11 minutes on this machine.\n")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "hf_step.md"), "w") as f:
        f.write("# One training step: dhp vs Hugging Face transformers (eager)\n\n"
                "Written by `bench/hf_step.py`. %s. A ratio above 1 means dhp is faster.\n\n"
                % env + head + rows + "\nWhere the time goes:\n\n" + where)
    with open(os.path.join(args.out, "hf_step.json"), "w") as f:
        json.dump(dict(environment=env, results=results), f, indent=1)
    print(head + rows)


if __name__ == "__main__":
    main()
