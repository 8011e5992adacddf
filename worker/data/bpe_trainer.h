// A small byte-level BPE trainer: learns merges from a text corpus with the same pre-tokenizer
// and byte-level alphabet that BpeTokenizer uses, and writes a Hugging Face `tokenizer.json`.
// It builds configs/tiny-tokenizer.json (see tiny_tokenizer.h); it is not meant for large
// corpora (each merge rescans every distinct word).
//
// Algorithm: the corpus is pre-tokenized and counted as distinct words of byte symbols (ids 0..255
// = byte values). Each step merges the most frequent adjacent pair (ties: the smallest
// (left id, right id)), giving it the next id, until the vocabulary has `vocab_size` entries or
// no pair occurs `min_frequency` times. Fully deterministic. Texts are pre-tokenized whole, as the
// encoder splits them, so Qwen2's pattern gives newline runs ("\n\n") and punctuation with its
// newlines (".\n", "}\n\n") as pieces and their merges are learned: keep the newlines in the
// texts (pass documents, not lines).
//
// Thread-safety: pure functions.
#ifndef DHP_WORKER_DATA_BPE_TRAINER_H_
#define DHP_WORKER_DATA_BPE_TRAINER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/bpe_tokenizer.h"
#include "worker/data/regex_splitter.h"

namespace dhp {
namespace data {

struct BpeTrainerOptions {
  int64_t vocab_size = 1000;  // 256 byte symbols + merges
  int64_t min_frequency = 2;
  std::string split_pattern = kQwen2SplitPattern;
};

struct BpeModel {
  std::vector<std::string> vocab;  // id -> byte-level string; ids 0..255 are the bytes
  std::vector<std::pair<std::string, std::string>> merges;  // by rank; merge i makes id 256 + i
  std::string split_pattern;
};

// Learns merges from `texts`. Errors: a vocab_size below 256, invalid UTF-8 in the corpus.
absl::StatusOr<BpeModel> TrainBpe(const std::vector<std::string>& texts,
                                  const BpeTrainerOptions& options);

// Serialises a model and its added tokens (ids at or above the model's vocabulary size, in
// increasing order) as tokenizer.json text that both BpeTokenizer and Hugging Face tokenizers
// load: Split(pattern, Isolated) + ByteLevel pre-tokenizer, ByteLevel decoder, merges as pairs.
absl::StatusOr<std::string> BpeModelToTokenizerJson(const BpeModel& model,
                                                    const std::vector<AddedToken>& added_tokens);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_BPE_TRAINER_H_
