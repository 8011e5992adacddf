// Image decoding (PNG via libpng, JPEG via libjpeg-turbo's TurboJPEG API) to 8-bit RGB, and PNG
// encoding (used by the synthetic dataset generator).
//
// Every decoded image is plain interleaved RGB, rows top to bottom. Grey, palette and 16-bit PNGs
// are converted to 8-bit RGB; an alpha channel is composited onto a white background, exactly as
// Qwen's own loader (qwen_vl_utils `to_rgb`: Pillow paste onto white with the alpha mask) does
// before the Hugging Face processor sees the image (the processor alone would drop alpha).
// No EXIF orientation is applied (neither does the Hugging Face processor). Decoded pixels are
// bit-identical to Pillow's for JPEG (same libjpeg-turbo, accurate IDCT, fancy upsampling) and
// for 8-bit PNG without a gAMA chunk; libpng's simplified API converts a PNG whose gAMA differs
// from sRGB to sRGB (Pillow ignores gAMA), and rounds 16-bit samples where Pillow truncates.
//
// Thread-safety: all functions are reentrant; they share no state.
#ifndef DHP_WORKER_DATA_IMAGE_IO_H_
#define DHP_WORKER_DATA_IMAGE_IO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dhp {
namespace data {

// An 8-bit RGB image, interleaved ([height, width, 3]).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // [height, width, 3]

  RgbImage() = default;
  RgbImage(int w, int h) : width(w), height(h), pixels(static_cast<size_t>(w) * h * 3, 0) {}

  uint8_t* at(int x, int y) { return &pixels[(static_cast<size_t>(y) * width + x) * 3]; }
  const uint8_t* at(int x, int y) const {
    return &pixels[(static_cast<size_t>(y) * width + x) * 3];
  }
};

// Decodes PNG or JPEG bytes (format detected from the signature). `name` is used in errors only
// (usually the file path).
absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes, absl::string_view name);

// Reads and decodes an image file. Errors name the file.
absl::StatusOr<RgbImage> ReadImageFile(const std::string& path);

// Encodes an image as an 8-bit RGB PNG.
absl::StatusOr<std::string> EncodePng(const RgbImage& image);

// Encodes and writes a PNG file. Errors name the file.
absl::Status WritePngFile(const RgbImage& image, const std::string& path);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_IMAGE_IO_H_
