// The tokenizer.json loader (worker/data/bpe_tokenizer) on arbitrary bytes: it may refuse them,
// it may not crash; a tokenizer it accepts must encode and decode text without crashing.
#include <cstdint>
#include <string>

#include "worker/data/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = dhp::data::BpeTokenizer::FromJson(json, "fuzz input");
  if (!tokenizer.ok()) return 0;
  for (const char* text : {"Hello, world! 12345", "  caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87\n\t",
                           "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"}) {
    auto ids = (*tokenizer)->Encode(text);
    if (ids.ok()) (*tokenizer)->Decode(*ids);
  }
  return 0;
}
