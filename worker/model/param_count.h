// Analytic parameter counts of a Qwen2.5-VL model from its config, without allocating it.
//
// Used to check presets against the published sizes, to size memory before placing a job, and
// by benchmarks. Must agree exactly with the modules in this folder (a test allocates the tiny
// model and compares). No LibTorch. Stateless and thread-safe.
#ifndef DHP_WORKER_MODEL_PARAM_COUNT_H_
#define DHP_WORKER_MODEL_PARAM_COUNT_H_

#include <cstdint>

#include "common/model_presets.h"

namespace dhp {

struct ParamCount {
  // Vision tower (`visual.`).
  int64_t vision_patch_embed = 0;
  int64_t vision_block = 0;   // one block (all blocks are the same size)
  int64_t vision_blocks = 0;  // depth * vision_block
  int64_t vision_merger = 0;
  int64_t vision_total = 0;
  // Text decoder (`model.`, `lm_head.`).
  int64_t text_embed = 0;
  int64_t text_layer = 0;   // one decoder layer
  int64_t text_layers = 0;  // num_layers * text_layer
  int64_t text_final_norm = 0;
  int64_t lm_head = 0;  // 0 when the embeddings are tied
  int64_t text_total = 0;

  int64_t total = 0;
};

ParamCount CountParams(const VisionConfig& vision, const TextConfig& text);

}  // namespace dhp

#endif  // DHP_WORKER_MODEL_PARAM_COUNT_H_
