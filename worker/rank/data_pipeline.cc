#include "worker/rank/data_pipeline.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dhp {

std::string ResolveDataPath(const std::string& root, const std::string& path) {
  if (path.empty() || path[0] == '/' || root.empty() || root == ".") return path;
  return root + "/" + path;
}

absl::StatusOr<std::unique_ptr<DataPipeline>> DataPipeline::Create(
    const v1::JobSpec& spec, const ModelPreset& preset, const DataPipelineOptions& options) {
  std::unique_ptr<DataPipeline> p(new DataPipeline());
  if (absl::Status s = p->Init(spec, preset, options); !s.ok()) return s;
  return p;
}

absl::Status DataPipeline::Init(const v1::JobSpec& spec, const ModelPreset& preset,
                                const DataPipelineOptions& options) {
  std::string tokenizer_path = options.tokenizer_path;
  if (tokenizer_path.empty()) {
    if (!spec.model().weights_path().empty()) {
      tokenizer_path = ResolveDataPath(options.data_root, spec.model().weights_path()) +
                       "/tokenizer.json";
    } else if (preset.name == "tiny") {
      tokenizer_path = "configs/tiny-tokenizer.json";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.preset ", preset.name, " has no built-in tokenizer: set model.weights_path to a "
          "Hugging Face checkpoint directory (its tokenizer.json is used) or pass a tokenizer"));
    }
  }
  absl::StatusOr<std::unique_ptr<data::BpeTokenizer>> tok =
      data::BpeTokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) return tok.status();
  tokenizer_ = std::move(*tok);
  if (tokenizer_->vocab_size() > preset.text.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        tokenizer_path, ": ", tokenizer_->vocab_size(), " token ids do not fit the ",
        preset.text.vocab_size, "-entry embedding of preset ", preset.name));
  }
  absl::StatusOr<data::ChatTemplate> chat = data::ChatTemplate::Create(*tokenizer_);
  if (!chat.ok()) return chat.status();
  chat_template_ = std::make_unique<data::ChatTemplate>(std::move(*chat));
  const data::ChatSpecialIds& ids = chat_template_->special_ids();
  const SpecialTokens& want = preset.tokens;
  if (ids.image_pad != want.image_pad || ids.vision_start != want.vision_start ||
      ids.vision_end != want.vision_end || ids.im_end != want.im_end ||
      (want.im_start >= 0 && ids.im_start != want.im_start)) {  // < 0: config.json lacks it
    return absl::InvalidArgumentError(absl::StrCat(
        tokenizer_path, ": special token ids (<|image_pad|> ", ids.image_pad, ", <|im_start|> ",
        ids.im_start, ") differ from preset ", preset.name, "'s (", want.image_pad, ", ",
        want.im_start, "): the tokenizer does not belong to this model"));
  }

  const v1::DataSpec& d = spec.data();
  data::DatasetRegistry registry;
  for (const auto& [name, src] : d.registry()) {
    absl::Status s = registry.Register(
        name, {ResolveDataPath(options.data_root, src.annotation_path()),
               ResolveDataPath(options.data_root, src.image_root()),
               src.has_weight() ? src.weight() : 1.0});
    if (!s.ok()) return s;
  }
  std::vector<std::string> names(d.datasets().begin(), d.datasets().end());
  std::vector<absl::Status> bad_records;
  absl::StatusOr<data::DatasetMix> mix = data::DatasetMix::Load(
      registry, names, options.skip_invalid_samples ? &bad_records : nullptr);
  if (!mix.ok()) return mix.status();
  mix_ = std::make_unique<data::DatasetMix>(std::move(*mix));
  std::string data_note = absl::StrCat("data: ", absl::StrJoin(names, ", "), ": ",
                                       mix_->epoch_size(), " samples per epoch");
  if (!bad_records.empty()) {
    absl::StrAppend(&data_note, "; ", bad_records.size(), " invalid records skipped (first: ",
                    bad_records[0].message(), ")");
  }
  notes_.push_back(std::move(data_note));

  data::SampleBuilderOptions b;
  b.preprocess.patch_size = preset.vision.patch_size;
  b.preprocess.merge_size = preset.vision.spatial_merge_size;
  b.preprocess.temporal_patch_size = preset.vision.temporal_patch_size;
  b.preprocess.min_pixels = d.min_pixels();
  b.preprocess.max_pixels = d.max_pixels();
  b.max_seq_len = d.max_seq_len();
  builder_ = std::make_unique<data::SampleBuilder>(*chat_template_, b);
  loader_options_.seed = spec.training().seed();
  loader_options_.skip_invalid = options.skip_invalid_samples;
  packing_.max_tokens = d.max_seq_len();
  packing_.image_pad_id = preset.tokens.image_pad;
  packing_.spatial_merge_size = preset.vision.spatial_merge_size;
  return absl::OkStatus();
}

std::unique_ptr<data::DataLoader> DataPipeline::MakeLoader(int shard_index, int num_shards) const {
  data::DataLoaderOptions o = loader_options_;
  o.shard_index = shard_index;
  o.num_shards = num_shards;
  return std::make_unique<data::DataLoader>(*mix_, *builder_, o);
}

}  // namespace dhp
