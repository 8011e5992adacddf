#include "worker/data/image_io.h"

#include <png.h>
#include <turbojpeg.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/file_util.h"

namespace dhp {
namespace data {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

RgbImage Gradient(int w, int h) {
  RgbImage img(w, h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.at(x, y);
      p[0] = static_cast<uint8_t>(x * 7);
      p[1] = static_cast<uint8_t>(y * 5);
      p[2] = static_cast<uint8_t>(x + y);
    }
  }
  return img;
}

// Encodes with libpng's simplified API in any format (the library under test only writes RGB).
std::string EncodePngFormat(const std::vector<uint8_t>& pixels, int w, int h, uint32_t format) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.width = w;
  png.height = h;
  png.format = format;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&png, nullptr, &size, 0, pixels.data(), 0, nullptr));
  std::string out(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&png, out.data(), &size, 0, pixels.data(), 0, nullptr));
  out.resize(size);
  return out;
}

TEST(ImageIoTest, PngRoundTripIsExact) {
  const RgbImage img = Gradient(37, 23);
  absl::StatusOr<std::string> png = EncodePng(img);
  ASSERT_TRUE(png.ok()) << png.status();
  absl::StatusOr<RgbImage> back = DecodeImage(*png, "mem.png");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->width, 37);
  EXPECT_EQ(back->height, 23);
  EXPECT_EQ(back->pixels, img.pixels);
}

TEST(ImageIoTest, PngFileRoundTrip) {
  const std::string path = TempDir() + "/image_io_test/sub/a.png";
  const RgbImage img = Gradient(8, 9);
  ASSERT_TRUE(WritePngFile(img, path).ok());
  absl::StatusOr<RgbImage> back = ReadImageFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pixels, img.pixels);
}

TEST(ImageIoTest, GreyPngBecomesRgb) {
  std::vector<uint8_t> grey = {0, 100, 200, 255};
  absl::StatusOr<RgbImage> img = DecodeImage(EncodePngFormat(grey, 2, 2, PNG_FORMAT_GRAY), "g");
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->pixels, (std::vector<uint8_t>{0, 0, 0, 100, 100, 100, 200, 200, 200, 255, 255,
                                                255}));
}

TEST(ImageIoTest, AlphaIsCompositedOntoWhite) {
  // Opaque red, fully transparent black, half-transparent black.
  std::vector<uint8_t> rgba = {255, 0, 0, 255, 0, 0, 0, 0, 0, 0, 0, 128};
  absl::StatusOr<RgbImage> img = DecodeImage(EncodePngFormat(rgba, 3, 1, PNG_FORMAT_RGBA), "a");
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->pixels,
            (std::vector<uint8_t>{255, 0, 0, 255, 255, 255, 127, 127, 127}));
}

TEST(ImageIoTest, JpegDecodesCloseToSource) {
  const RgbImage img = Gradient(32, 16);
  tjhandle tj = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long jpeg_size = 0;
  ASSERT_EQ(tjCompress2(tj, img.pixels.data(), img.width, 0, img.height, TJPF_RGB, &jpeg,
                        &jpeg_size, TJSAMP_444, 100, 0),
            0);
  const std::string bytes(reinterpret_cast<char*>(jpeg), jpeg_size);
  tjFree(jpeg);
  tjDestroy(tj);
  absl::StatusOr<RgbImage> back = DecodeImage(bytes, "x.jpg");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->width, 32);
  ASSERT_EQ(back->height, 16);
  int max_diff = 0;
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(int{img.pixels[i]} - int{back->pixels[i]}));
  }
  EXPECT_LE(max_diff, 8);
}

TEST(ImageIoTest, MissingFileNamesThePath) {
  absl::StatusOr<RgbImage> img = ReadImageFile("/nonexistent/dir/pic.png");
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(img.status().message(), HasSubstr("/nonexistent/dir/pic.png"));
}

TEST(ImageIoTest, CorruptFilesAreErrorsNamingTheFile) {
  const std::string png = *EncodePng(Gradient(16, 16));
  const std::string dir = TempDir() + "/image_io_test/";
  struct Case {
    std::string name;
    std::string bytes;
  };
  const std::vector<Case> cases = {
      {"empty.png", ""},
      {"text.png", "hello, I am not an image"},
      {"truncated.png", png.substr(0, png.size() / 2)},
      {"header_only.png", png.substr(0, 8)},
      {"truncated.jpg", std::string("\xFF\xD8\xFF\xE0\x00\x10JFIF", 10)},
  };
  for (const Case& c : cases) {
    const std::string path = dir + c.name;
    ASSERT_TRUE(WriteStringToFile(c.bytes, path).ok());
    absl::StatusOr<RgbImage> img = ReadImageFile(path);
    ASSERT_FALSE(img.ok()) << c.name;
    EXPECT_EQ(img.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(img.status().message(), HasSubstr(path)) << c.name;
  }
}

TEST(ImageIoTest, EncodeRejectsInconsistentImage) {
  RgbImage img(4, 4);
  img.pixels.resize(5);
  EXPECT_FALSE(EncodePng(img).ok());
}

}  // namespace
}  // namespace data
}  // namespace dhp
