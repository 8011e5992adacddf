#!/usr/bin/env python3
"""Parameter counts of the official Qwen2.5-VL sizes as Hugging Face transformers counts them.

  .venv/bin/python tools/hf_param_counts.py

Builds Qwen2_5_VLForConditionalGeneration on the meta device (no memory) from each preset's
published config values and prints total, vision and text counts as the C++ rows of
worker/model/param_count_test.cc (kTransformersCounts), which asserts dhp's analytic counts
equal them exactly. Tied embeddings count once, as model.parameters() does.
"""
import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

# name: text hidden, layers, heads, KV heads, MLP width, vocab, tied, vision MLP width
# (the values of common/model_presets_test.cc, from the published config.json files).
PRESETS = {
    "qwen2_5_vl_3b": (2048, 36, 16, 2, 11008, 151936, True, 3420),
    "qwen2_5_vl_7b": (3584, 28, 28, 4, 18944, 152064, False, 3420),
    "qwen2_5_vl_32b": (5120, 64, 40, 8, 27648, 152064, False, 3456),
    "qwen2_5_vl_72b": (8192, 80, 64, 8, 29568, 152064, False, 3456),
}


def count(hidden, layers, heads, kv, mlp, vocab, tied, vision_mlp):
    cfg = Qwen2_5_VLConfig(
        text_config=dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, intermediate_size=mlp, vocab_size=vocab),
        vision_config=dict(depth=32, hidden_size=1280, num_heads=16, intermediate_size=vision_mlp,
                           out_hidden_size=hidden, fullatt_block_indexes=[7, 15, 23, 31]),
        tie_word_embeddings=tied)
    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(cfg)
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for n, p in model.named_parameters() if ".visual." in n)
    return total, vision


def main():
    import transformers
    print(f"// transformers {transformers.__version__}, torch {torch.__version__}, meta device")
    for name, values in PRESETS.items():
        total, vision = count(*values)
        print(f'    {{"{name}", {total}, {vision}, {total - vision}}},')


if __name__ == "__main__":
    main()
