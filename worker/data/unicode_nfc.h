// Unicode Normalization Form C (canonical decomposition, then canonical composition) of UTF-8
// text, as Hugging Face tokenizers' `NFC` normalizer applies it. Backed by ICU (libicuuc); this
// header keeps ICU out of its users.
//
// Cost: ASCII text, and text that ICU's quick check finds already in NFC (nearly all real text),
// is returned as is, without a copy; only text that needs normalising is rewritten.
//
// Unicode version: ICU's tables (ICU 72 on Debian 12: Unicode 15.0). Characters assigned in a
// later Unicode version are passed through unchanged, as unassigned code points are.
//
// Thread-safety: stateless; safe to call from several threads.
#ifndef DHP_WORKER_DATA_UNICODE_NFC_H_
#define DHP_WORKER_DATA_UNICODE_NFC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dhp {
namespace data {

// The NFC form of `text`: `text` itself when it is already in NFC, otherwise a view of
// `*storage`, which receives the normalised string. Errors: invalid UTF-8 (InvalidArgument,
// naming the byte offset), or an ICU failure (Internal).
absl::StatusOr<absl::string_view> ToNfc(absl::string_view text, std::string* storage);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_UNICODE_NFC_H_
