#!/usr/bin/env python3
"""dhp's chat template against the official Qwen2.5-VL template rendered by transformers.

  .venv/bin/python tests/hf_chat_template_parity.py DHP_DATA_CHECK TOKENIZER_JSON

Writes a LLaVA-style dataset (conversations with 0, 1 and 3 images, several turns, a system
prompt, placeholders inside sentences, newlines, CRLF, whitespace runs, non-Latin text) with
images of odd sizes, and runs dhp-data-check --dump on it: dhp's rendering, token ids, labels
and image grids, as training sees them. For every record it then asserts:
  1. the text equals what transformers' apply_chat_template renders with the official template
     (tests/data/qwen2_5_vl_chat_template.jinja), once dhp's <|image_pad|> runs are collapsed
     to the one placeholder the template writes;
  2. image_grid_thw equals that of transformers' Qwen2-VL image processor (Pillow);
  3. the token ids equal what Qwen2.5-VL's processor feeds the model: each <|image_pad|>
     expanded to t*h*w/merge^2 copies for its image's grid (the processor's own rule; the
     processor class itself is not built because it wants a video processor, which needs
     torchvision), then encoded by transformers' tokenizer from the same tokenizer.json;
  4. the labelled tokens decode to the assistant answers, each followed by "<|im_end|>\\n".
Exit status 1 on any failure, with the first differing position.

The template file is the chat template published with Qwen/Qwen2.5-VL-7B-Instruct
(chat_template.json; Apache-2.0), the same string transformers' Qwen2.5-VL processor tests use.
It is the reference's input data, kept verbatim; dhp does not execute it.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image
from transformers import PreTrainedTokenizerFast
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                        "qwen2_5_vl_chat_template.jinja")
MIN_PIXELS, MAX_PIXELS = 56 * 56, 160 * 28 * 28
MERGE = 2
PAD = "<|image_pad|>"

IMAGES = {  # name: (width, height, mode)
    "a.png": (97, 61, "RGB"),
    "b.jpg": (300, 41, "RGB"),
    "c.png": (57, 233, "L"),
    "d.png": (120, 120, "RGBA"),
}

RECORDS = [
    {"id": "text-only", "conversations": [
        {"from": "human", "value": "What is the capital of France?"},
        {"from": "gpt", "value": "Paris."}]},
    {"id": "one-image", "image": "a.png", "conversations": [
        {"from": "human", "value": "<image>\nDescribe the picture."},
        {"from": "gpt", "value": "A gradient with two discs."}]},
    {"id": "three-images", "image": ["a.png", "b.jpg", "c.png"], "conversations": [
        {"from": "human", "value": "<image><image>\nCompare these, then look at <image> too."},
        {"from": "gpt", "value": "The first is wide; the third is tall and grey."}]},
    {"id": "multi-turn", "image": ["d.png"], "conversations": [
        {"from": "human", "value": "Hello!"},
        {"from": "gpt", "value": "Hi, how can I help?"},
        {"from": "human", "value": "What about this one? <image>"},
        {"from": "gpt", "value": "It has a transparent stripe.\n\nAnything else?"},
        {"from": "human", "value": "No."},
        {"from": "gpt", "value": "Goodbye."}]},
    {"id": "system", "image": "b.jpg", "conversations": [
        {"from": "system", "value": "You are terse."},
        {"from": "human", "value": "<image> Width?"},
        {"from": "gpt", "value": "300 px."}]},
    {"id": "whitespace", "conversations": [
        {"from": "human", "value": "Lines\r\nwith CRLF,\ttabs   and  runs of spaces  \n\n\nend"},
        {"from": "gpt", "value": "It's fine, we'll keep   them."}]},
    {"id": "unicode", "image": "c.png", "conversations": [
        {"from": "human", "value": "这是什么？ <image> Qu'est-ce que c'est ? 🙂"},
        {"from": "gpt", "value": "Eine graue Fläche — 灰色。"}]},
]


def write_images(folder):
    rng = np.random.default_rng(7)
    for name, (w, h, mode) in IMAGES.items():
        rgb = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        img = Image.fromarray(rgb, "RGB")
        if mode == "L":
            img = img.convert("L")
        elif mode == "RGBA":
            alpha = np.full((h, w), 255, np.uint8)
            alpha[:, w // 3: w // 2] = 0
            img = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
        img.save(os.path.join(folder, name), "JPEG" if name.endswith(".jpg") else "PNG")


def hf_messages(record):
    """The record as transformers' chat messages: image turns as content lists."""
    roles = {"human": "user", "gpt": "assistant", "system": "system"}
    messages = []
    for turn in record["conversations"]:
        text = turn["value"]
        if "<image>" not in text:
            messages.append({"role": roles[turn["from"]], "content": text})
            continue
        content = []
        for i, part in enumerate(text.split("<image>")):
            if i > 0:
                content.append({"type": "image"})
            if part:
                content.append({"type": "text", "text": part})
        messages.append({"role": roles[turn["from"]], "content": content})
    return messages


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def check(record, dumped, tokenizer, template, processor, image_dir):
    """Returns a list of failure messages for one record."""
    failures = []
    rid = record["id"]
    hf_text = tokenizer.apply_chat_template(hf_messages(record), chat_template=template,
                                            tokenize=False, add_generation_prompt=False)
    ours = re.sub("(%s)+" % re.escape(PAD), PAD, dumped["text"])
    if ours != hf_text:
        i = first_difference(ours, hf_text)
        failures.append(f"{rid}: text differs at {i}: dhp {ours[i:i + 40]!r} vs "
                        f"transformers {hf_text[i:i + 40]!r}")
    images = record.get("image", [])
    images = [images] if isinstance(images, str) else images
    grids = []
    for name in images:
        with Image.open(os.path.join(image_dir, name)) as img:
            grids.append([int(v) for v in processor(images=img)["image_grid_thw"][0]])
    if grids != dumped["image_grid_thw"]:
        failures.append(f"{rid}: image_grid_thw dhp {dumped['image_grid_thw']} vs HF {grids}")
    pieces = hf_text.split(PAD)
    expanded = pieces[0]
    for grid, piece in zip(grids, pieces[1:]):
        expanded += PAD * (grid[0] * grid[1] * grid[2] // (MERGE * MERGE)) + piece
    hf_ids = tokenizer(expanded)["input_ids"]
    if hf_ids != dumped["input_ids"]:
        i = first_difference(hf_ids, dumped["input_ids"])
        failures.append(f"{rid}: input_ids differ at {i} (of {len(hf_ids)} HF, "
                        f"{len(dumped['input_ids'])} dhp): HF {hf_ids[i:i + 8]} vs dhp "
                        f"{dumped['input_ids'][i:i + 8]}")
    labelled = [t for t, l in zip(dumped["input_ids"], dumped["labels"]) if l != -100]
    answers = "".join(t["value"] + "<|im_end|>\n" for t in record["conversations"]
                      if t["from"] == "gpt")
    if tokenizer.decode(labelled) != answers:
        failures.append(f"{rid}: labelled tokens decode to {tokenizer.decode(labelled)!r}, "
                        f"not the answers {answers!r}")
    return failures


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    binary, tokenizer_json = sys.argv[1:]
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json)
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    processor = Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    with tempfile.TemporaryDirectory() as tmp:
        write_images(tmp)
        annotations = os.path.join(tmp, "train.jsonl")
        with open(annotations, "w", encoding="utf-8") as f:
            for r in RECORDS:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        dump = os.path.join(tmp, "dump.jsonl")
        run = subprocess.run(
            [binary, "--annotations", annotations, "--image-root", tmp, "--tokenizer",
             tokenizer_json, "--min-pixels", str(MIN_PIXELS), "--max-pixels", str(MAX_PIXELS),
             "--dump", dump], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"dhp-data-check failed ({run.returncode}):\n{run.stdout}{run.stderr}")
            return 1
        with open(dump, encoding="utf-8") as f:
            dumped = [json.loads(line) for line in f]
        if [d["id"] for d in dumped] != [r["id"] for r in RECORDS]:
            print(f"dump holds {[d['id'] for d in dumped]}, expected every record")
            return 1
        failures = []
        for record, d in zip(RECORDS, dumped):
            failures += check(record, d, tokenizer, template, processor, tmp)
    for f in failures:
        print("FAIL", f)
    tokens = sum(len(d["input_ids"]) for d in dumped)
    print(f"hf_chat_template_parity: {len(RECORDS)} conversations, {tokens} tokens, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
