#!/usr/bin/env python3
"""dhp's image preprocessing against Hugging Face transformers' Qwen2-VL image processor.

  .venv/bin/python tests/hf_preprocess_parity.py PATH/TO/dhp-preprocess

Writes 24 images with Pillow (PNG and JPEG; RGB, grayscale, RGBA with varying alpha, palette;
odd sizes; tiny images that get upscaled; extreme aspect ratios up to 1:60), runs dhp's pipeline
on them (dhp-preprocess, worker/data/preprocess.h) and Qwen2VLImageProcessorPil (Pillow bicubic,
the reference dhp follows) with the same min/max pixels, and asserts per image:
  - image_grid_thw equal;
  - max |dhp - hf| over all patch values within one 8-bit level after normalisation, i.e.
    1/255 divided by the smallest CLIP std (0.2613): 0.0150.
Prints a table of the max differences. Exit status 1 on any failure.

Run by tools/test.sh. All 24 match bit for bit with Pillow 13.0.0 (max diff 0), once dhp
follows Pillow 13's order of the two resampling passes (preprocess.cc, ResizeBicubic); before,
8 two-axis resizes differed by up to 15 levels.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

MIN_PIXELS, MAX_PIXELS = 56 * 56, 512 * 28 * 28
ONE_LEVEL = (1 / 255) / 0.26130258  # the smallest CLIP std


def scene(width, height, seed):
    """A photo-like RGB array: gradients, discs and rectangles of colour, fine noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.stack([x / max(width - 1, 1), y / max(height - 1, 1),
                    0.5 + 0.5 * np.sin((x + y) / 9.0)], axis=-1) * 200.0
    for _ in range(6):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(0.05, 0.4) * max(width, height)
        mask = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        img[mask] = rng.uniform(0, 255, size=3)
    x0, y0 = rng.integers(0, max(width // 2, 1)), rng.integers(0, max(height // 2, 1))
    img[y0:y0 + height // 3, x0:x0 + width // 3] = rng.uniform(0, 255, size=3)
    img += rng.normal(0, 6, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_images(folder):
    cases = [  # (name, width, height, mode, format)
        ("rgb_640x480.png", 640, 480, "RGB", "PNG"),
        ("rgb_333x517.png", 333, 517, "RGB", "PNG"),
        ("rgb_1001x999.png", 1001, 999, "RGB", "PNG"),
        ("rgb_57x61.png", 57, 61, "RGB", "PNG"),
        ("rgb_12x9.png", 12, 9, "RGB", "PNG"),
        ("rgb_1500x1100.png", 1500, 1100, "RGB", "PNG"),
        ("wide_1800x30.png", 1800, 30, "RGB", "PNG"),
        ("tall_40x2400.png", 40, 2400, "RGB", "PNG"),
        ("rgb_640x480.jpg", 640, 480, "RGB", "JPEG"),
        ("rgb_401x299.jpg", 401, 299, "RGB", "JPEG"),
        ("rgb_1279x721.jpg", 1279, 721, "RGB", "JPEG"),
        ("rgb_29x83.jpg", 29, 83, "RGB", "JPEG"),
        ("wide_2000x45.jpg", 2000, 45, "RGB", "JPEG"),
        ("tall_33x1000.jpg", 33, 1000, "RGB", "JPEG"),
        ("gray_500x375.png", 500, 375, "L", "PNG"),
        ("gray_77x131.png", 77, 131, "L", "PNG"),
        ("gray_640x427.jpg", 640, 427, "L", "JPEG"),
        ("gray_1023x97.jpg", 1023, 97, "L", "JPEG"),
        ("rgba_400x300.png", 400, 300, "RGBA", "PNG"),
        ("rgba_123x457.png", 123, 457, "RGBA", "PNG"),
        ("rgba_opaque_256x256.png", 256, 256, "RGBA", "PNG"),
        ("palette_300x200.png", 300, 200, "P", "PNG"),
        ("palette_71x43.png", 71, 43, "P", "PNG"),
        ("rgb_2048x1536.jpg", 2048, 1536, "RGB", "JPEG"),
    ]
    for seed, (name, w, h, mode, fmt) in enumerate(cases):
        rgb = scene(w, h, seed)
        if mode == "RGBA":
            alpha = np.full((h, w), 255, np.uint8)
            if "opaque" not in name:
                yy, xx = np.mgrid[0:h, 0:w]
                alpha = ((xx * 255) // max(w - 1, 1)).astype(np.uint8)  # 0 .. 255 across
                alpha[yy % 7 == 0] = 0
            img = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
        elif mode == "L":
            img = Image.fromarray(rgb, "RGB").convert("L")
        elif mode == "P":
            img = Image.fromarray(rgb, "RGB").quantize(colors=64)
        else:
            img = Image.fromarray(rgb, "RGB")
        kwargs = {"quality": 90} if fmt == "JPEG" else {}
        img.save(os.path.join(folder, name), fmt, **kwargs)
    return [c[0] for c in cases]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    processor = Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        images = os.path.join(tmp, "images")
        out = os.path.join(tmp, "out")
        os.makedirs(images)
        os.makedirs(out)
        names = make_images(images)
        run = subprocess.run(
            [binary, "--min-pixels", str(MIN_PIXELS), "--max-pixels", str(MAX_PIXELS), out]
            + [os.path.join(images, n) for n in names],
            capture_output=True, text=True)
        if run.returncode != 0:
            print(f"dhp-preprocess failed ({run.returncode}):\n{run.stderr}")
            return 1
        grids = {}
        for line in run.stdout.split("\n"):
            if line:
                name, t, h, w = line.split()
                grids[name] = (int(t), int(h), int(w))
        print(f"| image | size | grid (dhp) | grid (HF) | max abs diff | bound {ONE_LEVEL:.4f} |")
        print("|---|---|---|---|---:|---|")
        for name in names:
            with Image.open(os.path.join(images, name)) as img:
                size = f"{img.width}x{img.height} {img.mode}"
                hf = processor(images=img, return_tensors="np")
            hf_grid = tuple(int(v) for v in hf["image_grid_thw"][0])
            hf_values = hf["pixel_values"].astype(np.float32)
            ours = np.fromfile(os.path.join(out, name + ".f32"), dtype="<f4")
            ok = grids.get(name) == hf_grid and ours.size == hf_values.size
            diff = float(np.abs(ours - hf_values.reshape(-1)).max()) if ok else float("inf")
            ok = ok and diff <= ONE_LEVEL
            failures += not ok
            print(f"| {name} | {size} | {grids.get(name)} | {hf_grid} | {diff:.3g} | "
                  f"{'ok' if ok else 'FAIL'} |")
    print(f"hf_preprocess_parity: {len(names) - failures} of {len(names)} images match")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
