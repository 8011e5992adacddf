#include "worker/data/sample_builder.h"

#include "absl/strings/str_cat.h"
#include "worker/data/file_util.h"
#include "worker/data/image_io.h"

namespace dhp {
namespace data {

absl::StatusOr<TrainingSample> SampleBuilder::Build(const LlavaRecord& record,
                                                    const std::string& image_root) const {
  auto err = [&](const absl::Status& s, auto&&... parts) {
    return absl::Status(s.code(), absl::StrCat(record.location, ": ", parts..., s.message()));
  };
  TrainingSample sample;
  sample.location = record.location;
  std::vector<int64_t> image_tokens;
  for (size_t i = 0; i < record.images.size(); ++i) {
    const std::string path = JoinPath(image_root, record.images[i]);
    absl::StatusOr<RgbImage> image = ReadImageFile(path);
    if (!image.ok()) return err(image.status(), "image ", i, ": ");
    absl::StatusOr<ImagePatches> patches = PreprocessImage(*image, options_.preprocess);
    if (!patches.ok()) return err(patches.status(), "image ", i, " (", path, "): ");
    image_tokens.push_back(NumImageTokens(patches->grid_thw, options_.preprocess.merge_size));
    sample.images.push_back(std::move(*patches));
  }
  absl::StatusOr<TokenizedConversation> tokens = template_->Apply(record.messages, image_tokens);
  if (!tokens.ok()) return err(tokens.status());
  if (static_cast<int64_t>(tokens->input_ids.size()) > options_.max_seq_len) {
    int64_t pads = 0;
    for (int64_t n : image_tokens) pads += n;
    return absl::InvalidArgumentError(absl::StrCat(
        record.location, ": sample has ", tokens->input_ids.size(), " tokens (", pads,
        " of them image tokens), more than max_seq_len ", options_.max_seq_len,
        "; raise max_seq_len or lower max_pixels"));
  }
  sample.input_ids = std::move(tokens->input_ids);
  sample.labels = std::move(tokens->labels);
  return sample;
}

}  // namespace data
}  // namespace dhp
