// The tokenizer of the `tiny` model preset (configs/tiny-tokenizer.json): a real byte-level BPE
// trained by bpe_trainer on the synthetic shapes captions, the chat template's text and a few
// hundred words of plain English, with 1000 regular tokens (256 bytes + 744 merges) and the
// Qwen2.5-VL special tokens at the ids common/model_presets.h fixes for `tiny`:
//   <|endoftext|> 1000, <|im_start|> 1001, <|im_end|> 1002, <|vision_start|> 1003,
//   <|vision_end|> 1004, <|image_pad|> 1005, <|video_pad|> 1006.
// The shipped file is exactly TrainTinyTokenizerJson()'s output (a test checks this);
// regenerate it with `bazel run //worker/data:dhp-train-tokenizer -- --out $PWD/configs/tiny-tokenizer.json`.
//
// Thread-safety: pure functions.
#ifndef DHP_WORKER_DATA_TINY_TOKENIZER_H_
#define DHP_WORKER_DATA_TINY_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/bpe_tokenizer.h"

namespace dhp {
namespace data {

constexpr int64_t kTinyTokenizerRegularVocab = 1000;

// The Qwen2.5-VL special tokens in id order, starting at `first_id`.
std::vector<AddedToken> QwenSpecialTokens(int64_t first_id);

// The built-in training corpus.
std::vector<std::string> TinyTokenizerCorpus();

// Trains on TinyTokenizerCorpus() plus `extra_texts` and returns tokenizer.json text.
absl::StatusOr<std::string> TrainTinyTokenizerJson(
    const std::vector<std::string>& extra_texts = {},
    int64_t vocab_size = kTinyTokenizerRegularVocab);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_TINY_TOKENIZER_H_
