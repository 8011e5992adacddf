// Turns a LLaVA record into a training sample: decodes and preprocesses its images, applies the
// chat template with one <|image_pad|> run per image, and checks the length limit.
//
// Errors name the record's file and line: an unreadable or corrupt image (with its path), an
// image the smart resize rejects, template errors (tag/image mismatch, turn order), and a sample
// longer than max_seq_len.
//
// Thread-safety: immutable after construction; Build() may run concurrently. Borrows the chat
// template, which must outlive the builder.
#ifndef DHP_WORKER_DATA_SAMPLE_BUILDER_H_
#define DHP_WORKER_DATA_SAMPLE_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/chat_template.h"
#include "worker/data/llava_annotations.h"
#include "worker/data/preprocess.h"

namespace dhp {
namespace data {

struct TrainingSample {
  std::string location;            // where the record came from
  std::vector<int64_t> input_ids;  // [S]
  std::vector<int64_t> labels;     // [S], kIgnoreLabel where not trained
  std::vector<ImagePatches> images;  // in the order of their <|image_pad|> runs
};

struct SampleBuilderOptions {
  PreprocessConfig preprocess;
  int64_t max_seq_len = 4096;  // tokens
};

class SampleBuilder {
 public:
  SampleBuilder(const ChatTemplate& chat_template, SampleBuilderOptions options)
      : template_(&chat_template), options_(std::move(options)) {}

  // `image_root` is the directory the record's image paths are relative to.
  absl::StatusOr<TrainingSample> Build(const LlavaRecord& record,
                                       const std::string& image_root) const;

  const SampleBuilderOptions& options() const { return options_; }

 private:
  const ChatTemplate* template_;
  SampleBuilderOptions options_;
};

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_SAMPLE_BUILDER_H_
