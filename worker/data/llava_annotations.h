// LLaVA-style annotation files: a JSON array of records, or JSONL (one record per line).
//
//   {"id": "...", "image": "a.png" | ["a.png", "b.png"],      (optional: text-only records)
//    "conversations": [{"from": "human", "value": "<image>\nWhat is this?"},
//                      {"from": "gpt", "value": "A cat."}]}
//
// `from` may be human/user, gpt/assistant or system. Image paths are kept as written (relative
// to the dataset's image root). Every error names the file and the line (for a JSON array, the
// line where the record starts, and its index): a record that is not an object, a missing or
// mistyped key, an unknown `from`, more `<image>` tags than images or fewer.
//
// Thread-safety: pure functions.
#ifndef DHP_WORKER_DATA_LLAVA_ANNOTATIONS_H_
#define DHP_WORKER_DATA_LLAVA_ANNOTATIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/chat_template.h"

namespace dhp {
namespace data {

struct LlavaRecord {
  std::string location;             // "file:line" or "file:line (record i)", for errors
  std::string id;                   // the record's "id", if any
  std::vector<std::string> images;  // as written in the file
  std::vector<Message> messages;
};

// Parses annotation text; `path` names it in errors. With `skipped` null the first invalid
// record is an error; otherwise invalid records are left out and their errors appended there
// (a JSON array that does not parse at all is still an error).
absl::StatusOr<std::vector<LlavaRecord>> ParseLlavaAnnotations(
    absl::string_view text, const std::string& path, std::vector<absl::Status>* skipped = nullptr);

// Reads and parses a file.
absl::StatusOr<std::vector<LlavaRecord>> LoadLlavaAnnotations(
    const std::string& path, std::vector<absl::Status>* skipped = nullptr);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_LLAVA_ANNOTATIONS_H_
