// A mid-size Qwen2.5-VL architecture for memory tests and benchmarks (worker/rank:rank_rss_test,
// bench/memory_bench): 202M parameters, large enough that parameters and activations dominate a
// rank's memory, small enough to build and train on a 2-core CPU. A 12-layer 1024-wide decoder
// (16 query heads over 4 KV heads, MLP 2816, vocabulary 32000, untied) and a 2-block vision
// tower; the tiny preset's tokens and geometry otherwise. Not a published model: not in
// FindModelPreset.
#ifndef DHP_COMMON_MID_PRESET_H_
#define DHP_COMMON_MID_PRESET_H_

#include "common/model_presets.h"

namespace dhp {

inline ModelPreset MidSizePreset() {
  ModelPreset p = *FindModelPreset("tiny");
  p.name = "mid";
  p.vision.depth = 2;
  p.vision.hidden_size = 128;
  p.vision.num_heads = 4;
  p.vision.intermediate_size = 256;
  p.vision.fullatt_block_indexes = {1};
  p.vision.out_hidden_size = 1024;
  p.text.hidden_size = 1024;
  p.text.num_layers = 12;
  p.text.num_heads = 16;
  p.text.num_kv_heads = 4;
  p.text.intermediate_size = 2816;
  p.text.vocab_size = 32000;
  p.text.mrope_section = {8, 12, 12};  // head_dim 64
  return p;
}

}  // namespace dhp

#endif  // DHP_COMMON_MID_PRESET_H_
