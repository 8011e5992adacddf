#include "worker/data/shapes_generator.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/data/file_util.h"

namespace dhp {
namespace data {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::vector<nlohmann::json> ReadJsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Which third of the image a coordinate falls in.
int Third(int v, int size) { return std::min(2, v / (size / 3)); }

TEST(ShapesGeneratorTest, WrittenImagesMatchTheirCaptions) {
  const std::string dir = TempDir() + "/shapes_a";
  ASSERT_TRUE(WriteShapesDataset({dir, 40, 112, 7}).ok());
  const std::vector<nlohmann::json> records = ReadJsonl(dir + "/train.jsonl");
  ASSERT_EQ(records.size(), 40u);
  std::set<std::string> captions;
  for (const nlohmann::json& r : records) {
    const std::string caption = r["conversations"][1]["value"];
    const std::string question = r["conversations"][0]["value"];
    EXPECT_EQ(r["conversations"][0]["from"], "human");
    EXPECT_EQ(r["conversations"][1]["from"], "gpt");
    EXPECT_EQ(question.rfind("<image>\n", 0), 0u) << question;
    captions.insert(caption);

    absl::StatusOr<RgbImage> img = ReadImageFile(dir + "/" + r["image"].get<std::string>());
    ASSERT_TRUE(img.ok()) << img.status();
    ASSERT_EQ(img->width, 112);
    ASSERT_EQ(img->height, 112);

    // The caption names the colour found at the shape's centre...
    const int cx = r["shape"]["center"][0], cy = r["shape"]["center"][1];
    const uint8_t* px = img->at(cx, cy);
    int named = -1;
    for (size_t c = 0; c < ShapeColors().size(); ++c) {
      if (caption.find(std::string(" ") + ShapeColors()[c].name + " ") != std::string::npos) {
        named = static_cast<int>(c);
      }
    }
    ASSERT_GE(named, 0) << caption;
    const auto& rgb = ShapeColors()[named].rgb;
    EXPECT_TRUE(px[0] == rgb[0] && px[1] == rgb[1] && px[2] == rgb[2]) << caption;
    // ...the kind...
    EXPECT_NE(caption.find(r["shape"]["kind"].get<std::string>()), std::string::npos);
    // ...and the place: words "left"/"right"/"top"/"bottom" agree with the centre's thirds.
    const int col = Third(cx, 112), row = Third(cy, 112);
    EXPECT_EQ(caption.find("left") != std::string::npos, col == 0) << caption << " cx " << cx;
    EXPECT_EQ(caption.find("right") != std::string::npos, col == 2) << caption << " cx " << cx;
    EXPECT_EQ(caption.find("top") != std::string::npos, row == 0) << caption << " cy " << cy;
    EXPECT_EQ(caption.find("bottom") != std::string::npos, row == 2) << caption << " cy " << cy;
    // A corner pixel is background (light grey), not the shape.
    EXPECT_GE(img->at(0, 0)[0], 235);
    EXPECT_EQ(img->at(0, 0)[0], img->at(0, 0)[2]);
  }
  EXPECT_GT(captions.size(), 20u);  // varied
}

TEST(ShapesGeneratorTest, DeterministicFromSeed) {
  const ShapesSample a = MakeShapesSample(3, 5, 112);
  const ShapesSample b = MakeShapesSample(3, 5, 112);
  EXPECT_EQ(a.image.pixels, b.image.pixels);
  EXPECT_EQ(a.caption, b.caption);
  int differing = 0;
  for (int i = 0; i < 10; ++i) {
    differing += MakeShapesSample(3, i, 112).image.pixels != MakeShapesSample(4, i, 112).image.pixels;
  }
  EXPECT_GE(differing, 8);

  const std::string d1 = TempDir() + "/shapes_b1", d2 = TempDir() + "/shapes_b2";
  ASSERT_TRUE(WriteShapesDataset({d1, 5, 56, 11}).ok());
  ASSERT_TRUE(WriteShapesDataset({d2, 5, 56, 11}).ok());
  EXPECT_EQ(*ReadFileToString(d1 + "/train.jsonl"), *ReadFileToString(d2 + "/train.jsonl"));
  EXPECT_EQ(*ReadFileToString(d1 + "/images/000004.png"), *ReadFileToString(d2 + "/images/000004.png"));
}

TEST(ShapesGeneratorTest, CaptionVocabulary) {
  EXPECT_EQ(ShapeCaption(ShapeKind::kCircle, 0, 1, 0), "a red circle on the left");
  EXPECT_EQ(ShapeCaption(ShapeKind::kTriangle, 2, 0, 2), "a blue triangle in the top right corner");
  EXPECT_EQ(ShapeCaption(ShapeKind::kSquare, 5, 2, 1), "an orange square at the bottom");
  EXPECT_EQ(AllShapeCaptions().size(), 3u * ShapeColors().size() * 9);
}

TEST(ShapesGeneratorTest, BadOptionsAreErrors) {
  EXPECT_FALSE(WriteShapesDataset({"", 5, 112, 0}).ok());
  EXPECT_FALSE(WriteShapesDataset({TempDir() + "/x", 5, 10, 0}).ok());
}

}  // namespace
}  // namespace data
}  // namespace dhp
