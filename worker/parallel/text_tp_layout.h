// The shard layout of the text stage under tensor parallelism (TextTpModel::shard_layout(),
// text_tp_model.h) computed from the config and the degree alone, without building the model,
// its full weights or a communicator: what an offline tool needs to re-assemble full parameters
// from the TP shards of a checkpoint (worker/rank/ckpt_export.h). Pure C++ (no LibTorch).
//
// By checkpoint name (L layers, T ranks, D head_dim), as TextTpPlan (tp_shard.h) splits them:
//   model.embed_tokens.weight                         dim 0, vocabulary ranges
//   model.layers.N.self_attn.{q_proj}.{weight,bias}   dim 0, QRows()
//   model.layers.N.self_attn.{k,v}_proj.{weight,bias} dim 0, KvRows() (repeats: replicated heads)
//   model.layers.N.self_attn.o_proj.weight            dim 1, QRows()
//   model.layers.N.mlp.{gate,up}_proj.weight          dim 0, intermediate ranges
//   model.layers.N.mlp.down_proj.weight               dim 1, intermediate ranges
//   lm_head.weight (untied only)                      dim 0, vocabulary ranges
// Everything else (the RMS norms) is replicated and absent from the map. text_tp_layout_test.cc
// builds TextTpModel and checks that this equals its shard_layout() for several degrees.
//
// Stateless and thread-safe.
#ifndef DHP_WORKER_PARALLEL_TEXT_TP_LAYOUT_H_
#define DHP_WORKER_PARALLEL_TEXT_TP_LAYOUT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/model_presets.h"
#include "worker/parallel/tp_shard.h"

namespace dhp::tp {

// Full parameter name -> its shard over `tp_size` ranks (the same map as tp_layers.h's
// ShardLayout). InvalidArgument for a degree the config does not support (ValidateTextTp).
absl::StatusOr<std::map<std::string, ParamShard>> TextTpShardLayout(const TextConfig& config,
                                                                    int tp_size);

}  // namespace dhp::tp

#endif  // DHP_WORKER_PARALLEL_TEXT_TP_LAYOUT_H_
