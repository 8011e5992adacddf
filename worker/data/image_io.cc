#include "worker/data/image_io.h"

#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/data/file_util.h"

namespace dhp {
namespace data {
namespace {

// Largest image accepted, in pixels: a corrupt header must not make us allocate gigabytes.
constexpr uint64_t kMaxPixels = uint64_t{1} << 28;  // 268M pixels, ~800 MB of RGB

bool IsPng(absl::string_view b) {
  static const unsigned char kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), kSig, 8) == 0;
}

bool IsJpeg(absl::string_view b) {
  return b.size() >= 3 && static_cast<unsigned char>(b[0]) == 0xFF &&
         static_cast<unsigned char>(b[1]) == 0xD8 && static_cast<unsigned char>(b[2]) == 0xFF;
}

absl::StatusOr<RgbImage> DecodePng(absl::string_view bytes, absl::string_view name) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": corrupt PNG header: ", image.message));
  }
  if (image.width == 0 || image.height == 0 ||
      static_cast<uint64_t>(image.width) * image.height > kMaxPixels) {
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat(name, ": PNG size ", image.width, "x",
                                                   image.height, " is empty or too large"));
  }
  image.format = PNG_FORMAT_RGBA;
  // Treat 16-bit samples as already sRGB-encoded (scale them to 8 bits, as Pillow roughly does)
  // instead of as linear light (libpng's default, which would gamma-encode them).
  image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, /*background=*/nullptr, rgba.data(), /*row_stride=*/0,
                             /*colormap=*/nullptr)) {
    const std::string message = image.message;
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat(name, ": corrupt PNG data: ", message));
  }
  RgbImage out(static_cast<int>(image.width), static_cast<int>(image.height));
  const size_t n = static_cast<size_t>(out.width) * out.height;
  for (size_t i = 0; i < n; ++i) {
    const unsigned a = rgba[i * 4 + 3];
    for (int c = 0; c < 3; ++c) {
      const unsigned v = rgba[i * 4 + c];
      // Composite onto white, rounded to nearest: v*a/255 + 255*(255-a)/255.
      out.pixels[i * 3 + c] = static_cast<uint8_t>((v * a + 255u * (255u - a) + 127u) / 255u);
    }
  }
  return out;
}

struct TjDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};

absl::StatusOr<RgbImage> DecodeJpeg(absl::string_view bytes, absl::string_view name) {
  std::unique_ptr<void, TjDeleter> tj(tjInitDecompress());
  if (!tj) return absl::InternalError("tjInitDecompress failed");
  // TurboJPEG's API takes non-const buffers but does not write to them.
  auto* src = reinterpret_cast<unsigned char*>(const_cast<char*>(bytes.data()));
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.get(), src, bytes.size(), &width, &height, &subsamp, &colorspace) !=
      0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": corrupt JPEG header: ", tjGetErrorStr2(tj.get())));
  }
  if (width <= 0 || height <= 0 || static_cast<uint64_t>(width) * height > kMaxPixels) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": JPEG size ", width, "x", height, " is empty or too large"));
  }
  RgbImage out(width, height);
  // Accurate integer IDCT and fancy upsampling: libjpeg's defaults, which Pillow uses too.
  if (tjDecompress2(tj.get(), src, bytes.size(), out.pixels.data(), width, /*pitch=*/0, height,
                    TJPF_RGB, TJFLAG_ACCURATEDCT) != 0) {
    // Warnings (e.g. a truncated but displayable file) still produce an image; errors do not.
    if (tjGetErrorCode(tj.get()) != TJERR_WARNING) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": corrupt JPEG data: ", tjGetErrorStr2(tj.get())));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes, absl::string_view name) {
  if (IsPng(bytes)) return DecodePng(bytes, name);
  if (IsJpeg(bytes)) return DecodeJpeg(bytes, name);
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": empty image file"));
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": not a PNG or JPEG file (unrecognised signature)"));
}

absl::StatusOr<RgbImage> ReadImageFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  return DecodeImage(*bytes, path);
}

absl::StatusOr<std::string> EncodePng(const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return absl::InvalidArgumentError(absl::StrCat("EncodePng: bad image ", image.width, "x",
                                                   image.height, " with ", image.pixels.size(),
                                                   " bytes"));
  }
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  // First call computes the size, second writes.
  if (!png_image_write_to_memory(&png, nullptr, &size, /*convert_to_8_bit=*/0,
                                 image.pixels.data(), /*row_stride=*/0, nullptr)) {
    return absl::InternalError(absl::StrCat("EncodePng: ", png.message));
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(), 0, nullptr)) {
    return absl::InternalError(absl::StrCat("EncodePng: ", png.message));
  }
  out.resize(size);
  return out;
}

absl::Status WritePngFile(const RgbImage& image, const std::string& path) {
  absl::StatusOr<std::string> png = EncodePng(image);
  if (!png.ok()) {
    return absl::Status(png.status().code(), absl::StrCat(path, ": ", png.status().message()));
  }
  return WriteStringToFile(*png, path);
}

}  // namespace data
}  // namespace dhp
