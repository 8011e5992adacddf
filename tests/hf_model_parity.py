#!/usr/bin/env python3
"""dhp's Qwen2.5-VL against Hugging Face transformers' implementation, in fp32.

  .venv/bin/python tests/hf_model_parity.py --parity bazel-bin/worker/rank/dhp-hf-parity
  .venv/bin/python tests/hf_model_parity.py --golden worker/rank/testdata/hf_golden

For each case, a tiny random Qwen2_5_VLForConditionalGeneration is saved with save_pretrained
(config.json + model.safetensors). transformers (eager attention) then runs forward and backward
on a packed batch, and one AdamW step with dhp's parameter groups and gradient clipping. What it
computed goes to reference.safetensors beside the model: the inputs, logits, loss, every
gradient and every parameter after the step, by checkpoint name. `dhp-hf-parity` loads the
directory through dhp's own config parser and strict weight loading, does the same, and compares
element by element (it prints the table and fails on any element out of bounds).

--golden writes the small checked-in case that worker/rank:hf_golden_test reads without Python:
logits, loss and gradient norms only.

--dhp-train DHP_TRAIN --gen-shapes DHP_GEN_SHAPES also trains one step with dhp-train from the
first case's directory alone (model.weights_path, no preset; the tiny tokenizer fits its special
ids) on a generated shapes dataset, and gives transformers the batch dhp-train dumped
(--dump-first-batch): the two losses must agree to 1e-6 + 1e-7 |loss|.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 1003, 1004, 1005, 1006
PATCH_DIM = 3 * 2 * 14 * 14  # channels * temporal patch * patch * patch
OPTIM = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip_norm=1.0)

# name -> (text config, vision config, tied embeddings, samples: one list of image grids each)
CASES = {
    # Window attention with full-attention blocks 1 and 3 (window 112 px = 4 merged units), an
    # image whose merged grid (5 x 9) is odd and leaves padded windows, GQA 4:2, M-RoPE 2/3/3.
    "window_gqa_odd_grid": (
        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96, mrope_section=[2, 3, 3]),
        dict(depth=4, hidden_size=32, num_heads=2, intermediate_size=48, window_size=112,
             fullatt_block_indexes=[1, 3]),
        False, [[(1, 10, 18)]]),
    # Tied embeddings, multi-head attention (no GQA), another M-RoPE split, three images.
    "tied_mha_three_images": (
        dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
             intermediate_size=64, mrope_section=[4, 4, 4]),
        dict(depth=2, hidden_size=32, num_heads=4, intermediate_size=40, window_size=56,
             fullatt_block_indexes=[0]),
        True, [[(1, 4, 6), (1, 6, 10), (1, 2, 2)]]),
    # A packed batch of three samples (image, text only, two images): attention and positions
    # restart at every sample boundary, and the loss is the mean over all labelled tokens.
    "packed_three_samples": (
        dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
             intermediate_size=80, mrope_section=[1, 1, 2]),
        dict(depth=3, hidden_size=48, num_heads=3, intermediate_size=64, window_size=112,
             fullatt_block_indexes=[2]),
        False, [[(1, 6, 6)], [], [(1, 8, 4), (1, 2, 6)]]),
}
GOLDEN = (
    dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
         intermediate_size=48, mrope_section=[1, 1, 2], vocab_size=1024),
    dict(depth=2, hidden_size=16, num_heads=2, intermediate_size=24, window_size=56,
         fullatt_block_indexes=[1]),
    False, [[(1, 6, 4)], [(1, 2, 2)]])


def make_config(text, vision, tied):
    text = dict(text)
    section = text.pop("mrope_section")
    text.setdefault("vocab_size", 1100)
    text["rope_parameters"] = dict(rope_type="default", mrope_section=section, rope_theta=10000.0)
    text.update(bos_token_id=1000, eos_token_id=1002, rms_norm_eps=1e-6)
    vision = dict(vision, out_hidden_size=text["hidden_size"])
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tied,
                            image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD,
                            vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)


def make_sample(grids, gen):
    """Token ids and labels of one sample: text, then per image start/pads/end and text."""
    def text(n):
        return torch.randint(0, 1000, (n,), generator=gen).tolist()
    ids = text(3)
    for t, h, w in grids:
        ids += [VISION_START] + [IMAGE_PAD] * (t * h * w // 4) + [VISION_END] + text(4)
    ids += text(2)
    ids = torch.tensor(ids)
    labels = ids.clone()
    labels[:2] = -100                 # a prompt without loss
    labels[ids == IMAGE_PAD] = -100   # no loss on image tokens
    return ids, labels


def checkpoint_name(name):
    """named_parameters() name -> the name save_pretrained wrote (and dhp uses)."""
    for old, new in (("model.visual.", "visual."), ("model.language_model.", "model.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


def uses_weight_decay(name, p):  # worker/optim/optimizer.h's rule
    return p.dim() > 1 and not name.endswith(".bias") and "norm" not in name


def run_case(out_dir, spec, seed, golden=False):
    text, vision, tied, samples = spec
    torch.manual_seed(seed)
    cfg = make_config(text, vision, tied)
    model = Qwen2_5_VLForConditionalGeneration(cfg).float()
    model.config._attn_implementation = "eager"
    model.save_pretrained(out_dir, safe_serialization=True)
    return write_reference(model, out_dir, samples, seed, golden)


def write_reference(model, out_dir, samples, seed, golden=False):
    """transformers' outputs for `model` (fp32, eager attention) on a packed batch of `samples`
    (one list of image grids each; inputs drawn from seed + 1) into out_dir/reference.safetensors,
    where dhp-hf-parity reads them. The AdamW step (unless golden) changes model's parameters."""
    params = {checkpoint_name(n): p for n, p in model.named_parameters()}

    gen = torch.Generator().manual_seed(seed + 1)
    ids, labels, pixels, grids, cu = [], [], [], [], [0]
    loss_sum, count, logits_all = 0.0, 0, []
    for sample_grids in samples:
        s_ids, s_labels = make_sample(sample_grids, gen)
        n_patches = sum(t * h * w for t, h, w in sample_grids)
        s_pixels = torch.randn(n_patches, PATCH_DIM, generator=gen)
        kwargs = dict(input_ids=s_ids[None], use_cache=False,
                      mm_token_type_ids=(s_ids == IMAGE_PAD).int()[None])
        if sample_grids:
            kwargs.update(pixel_values=s_pixels, image_grid_thw=torch.tensor(sample_grids))
        out = model(**kwargs, labels=s_labels[None])
        logits = out.logits[0]
        s_sum = F.cross_entropy(logits[:-1], s_labels[1:], ignore_index=-100, reduction="sum")
        s_count = int((s_labels[1:] != -100).sum())
        # transformers' own loss of this sample is the mean of the same terms.
        assert torch.allclose(out.loss, s_sum / s_count, rtol=1e-6, atol=0), (out.loss, s_sum)
        loss_sum, count = loss_sum + s_sum, count + s_count
        logits_all.append(logits.detach())
        ids.append(s_ids), labels.append(s_labels), pixels.append(s_pixels)
        grids += sample_grids
        cu.append(cu[-1] + len(s_ids))
    loss = loss_sum / count
    loss.backward()

    ref = {"input_ids": torch.cat(ids), "labels": torch.cat(labels),
           "cu_seqlens": torch.tensor(cu, dtype=torch.int64),
           "pixel_values": torch.cat(pixels) if grids else torch.zeros(0, PATCH_DIM),
           "image_grid_thw": torch.tensor(grids, dtype=torch.int64).reshape(-1, 3),
           "logits": torch.cat(logits_all), "loss": loss.detach().reshape(1)}
    for name, p in params.items():
        key = "grad_norm/" if golden else "grad/"
        ref[key + name] = p.grad.norm().reshape(1) if golden else p.grad.clone()
    if not golden:
        ref.update(optimizer_step(params))
    meta = {k: repr(v) for k, v in OPTIM.items()}
    meta["transformers"] = transformers.__version__
    meta["torch"] = torch.__version__
    save_file({k: v.contiguous() for k, v in ref.items()},
              os.path.join(out_dir, "reference.safetensors"), metadata=meta)
    return float(loss.detach()), len(params)


def optimizer_step(params):
    """torch.optim.AdamW after clip_grad_norm_, on dhp's two parameter groups."""
    decay = [p for n, p in params.items() if uses_weight_decay(n, p)]
    no_decay = [p for n, p in params.items() if not uses_weight_decay(n, p)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": OPTIM["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=OPTIM["lr"], betas=(OPTIM["beta1"], OPTIM["beta2"]), eps=OPTIM["eps"])
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), OPTIM["grad_clip_norm"])
    opt.step()
    out = {"step/" + n: p.detach().clone() for n, p in params.items()}
    out["grad_total_norm"] = norm.detach().reshape(1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parity", help="path of the dhp-hf-parity binary: generate and compare")
    ap.add_argument("--golden", help="write the golden case into this directory")
    ap.add_argument("--keep", help="generate the cases under this directory (default: a temp dir)")
    ap.add_argument("--dhp-train", help="also compare a dhp-train step's loss (needs --gen-shapes)")
    ap.add_argument("--gen-shapes", help="the dhp-gen-shapes binary, for --dhp-train")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.golden:
        os.makedirs(args.golden, exist_ok=True)
        loss, n = run_case(args.golden, GOLDEN, seed=7, golden=True)
        os.remove(os.path.join(args.golden, "generation_config.json"))  # not read by dhp
        print(f"golden case in {args.golden}: loss {loss:.8f}, {n} parameters")
        return 0
    if not args.parity:
        ap.error("give --parity BINARY or --golden DIR")
    root = args.keep or tempfile.mkdtemp(prefix="dhp-hf-parity-")
    dirs = []
    for i, (name, spec) in enumerate(CASES.items()):
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        loss, n = run_case(d, spec, seed=100 + i)
        print(f"{name}: transformers {transformers.__version__} loss {loss:.8f}, {n} parameters")
        dirs.append(d)
    code = subprocess.run([args.parity] + dirs).returncode
    if args.dhp_train:
        code = max(code, train_step_parity(args, dirs[0], root))
    if not args.keep:
        shutil.rmtree(root)
    return code


def train_step_parity(args, case_dir, root):
    """dhp-train's first-step loss on a model directory alone, against transformers'."""
    data = os.path.join(root, "data-root")
    subprocess.run([args.gen_shapes, "--out", os.path.join(data, "data", "shapes"), "--count",
                    "8", "--size", "84"], check=True, capture_output=True)
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with open(os.path.join(repo, "configs", "tiny-cpu.yaml")) as f:
        spec = f.read()
    spec = spec.replace("  preset: tiny", "  weights_path: %s  #" % case_dir)
    spec_path = os.path.join(root, "hf-dir-spec.yaml")
    with open(spec_path, "w") as f:
        f.write(spec)
    dump = os.path.join(root, "first-batch.safetensors")
    proc = subprocess.run(
        [args.dhp_train, "-f", spec_path, "--data-root", data, "--steps", "1", "--tokenizer",
         os.path.join(repo, "configs", "tiny-tokenizer.json"), "--dump-first-batch", dump],
        capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        return 1
    with safe_open(dump, "pt") as f:
        meta = f.metadata()
        batch = {k: f.get_tensor(k) for k in f.keys()}
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        case_dir, attn_implementation="eager", dtype=torch.float32)
    cu, grids = batch["cu_seqlens"].tolist(), batch["image_grid_thw"].tolist()
    loss_sum, count, g, p = 0.0, 0, 0, 0
    with torch.no_grad():
        for b, e in zip(cu[:-1], cu[1:]):
            ids, labels = batch["input_ids"][b:e], batch["labels"][b:e]
            n_img = int(((ids == VISION_START)).sum())
            kw = dict(input_ids=ids[None], use_cache=False,
                      mm_token_type_ids=(ids == IMAGE_PAD).int()[None])
            if n_img:
                sg = grids[g:g + n_img]
                n_patch = sum(t * h * w for t, h, w in sg)
                kw.update(pixel_values=batch["pixel_values"][p:p + n_patch],
                          image_grid_thw=torch.tensor(sg))
                g, p = g + n_img, p + n_patch
            logits = model(**kw).logits[0]
            loss_sum += float(F.cross_entropy(logits[:-1], labels[1:],
                                              ignore_index=-100, reduction="sum"))
            count += int((labels[1:] != -100).sum())
    hf, dhp = loss_sum / count, float(meta["loss"])
    bound = 1e-6 + 1e-7 * abs(hf)
    ok = abs(dhp - hf) <= bound and count == int(meta["loss_tokens"])
    print("dhp-train, one step from %s alone (%d samples, %d loss targets): loss dhp %.9f, "
          "transformers %.9f, |diff| %.3e, bound %.1e: %s"
          % (case_dir, len(cu) - 1, count, dhp, hf, abs(dhp - hf), bound,
             "ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
