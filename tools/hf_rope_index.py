#!/usr/bin/env python3
"""M-RoPE position ids of Hugging Face transformers' Qwen2.5-VL get_rope_index, for the
sequences of worker/model/rope_index_test.cc (HfRopeIndex): text only, one image, three images.

  .venv/bin/python tools/hf_rope_index.py

Each sequence is <|im_start|> 9 10, then per image <|vision_start|>, t*h*w/4 <|image_pad|>,
<|vision_end|> 11 12, then 13 <|im_end|> 14 (the official special token ids). Prints the C++
rows: name, grids, and the positions axis-major (all t, then h, then w), as dhp returns them.
"""
import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD = 151644, 151645, 151652, 151653, 151655
CASES = [("text_only", []), ("one_image", [(1, 6, 10)]),
         ("three_images", [(1, 4, 6), (1, 10, 4), (1, 2, 2)])]


def sequence(grids):
    ids = [IM_START, 9, 10]
    for t, h, w in grids:
        ids += [VISION_START] + [IMAGE_PAD] * (t * h * w // 4) + [VISION_END, 11, 12]
    return ids + [13, IM_END, 14]


def main():
    import transformers
    cfg = Qwen2_5_VLConfig(
        text_config=dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64),
        vision_config=dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32,
                           out_hidden_size=64))
    with torch.device("meta"):  # get_rope_index reads only the config
        model = Qwen2_5_VLForConditionalGeneration(cfg)
    print(f"// transformers {transformers.__version__}: model.get_rope_index")
    for name, grids in CASES:
        ids = torch.tensor([sequence(grids)])
        types = (ids == IMAGE_PAD).int()  # mm_token_type_ids: 1 for image tokens
        grid = torch.tensor(grids) if grids else None
        pos, _ = model.model.get_rope_index(ids, types, image_grid_thw=grid)
        flat = ", ".join(str(v) for v in pos[:, 0].reshape(-1).tolist())
        grid_cc = ", ".join(f"{{{t}, {h}, {w}}}" for t, h, w in grids)
        print(f'    {{"{name}", {{{grid_cc}}}, {{{flat}}}}},')


if __name__ == "__main__":
    main()
