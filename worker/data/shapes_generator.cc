#include "worker/data/shapes_generator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "worker/data/file_util.h"
#include "worker/data/rng.h"

namespace dhp {
namespace data {
namespace {

// Phrases for (row, col).
const char* const kPlaces[3][3] = {
    {"in the top left corner", "at the top", "in the top right corner"},
    {"on the left", "in the center", "on the right"},
    {"in the bottom left corner", "at the bottom", "in the bottom right corner"},
};

bool Inside(const DrawnShape& s, double x, double y) {
  const double dx = x - s.cx, dy = y - s.cy, r = s.radius;
  switch (s.kind) {
    case ShapeKind::kCircle:
      return dx * dx + dy * dy <= r * r;
    case ShapeKind::kSquare:
      return dx >= -r && dx <= r && dy >= -r && dy <= r;
    case ShapeKind::kTriangle:
      // Apex (0, -r), base from (-r, r) to (r, r): half-width grows from 0 to r downwards.
      return dy >= -r && dy <= r && std::abs(dx) <= (dy + r) / 2.0;
  }
  return false;
}

std::string IndexName(int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%06lld", static_cast<long long>(index));
  return buf;
}

}  // namespace

const std::vector<ShapeColor>& ShapeColors() {
  static const std::vector<ShapeColor>* colors = new std::vector<ShapeColor>{
      {"red", {220, 30, 30}},    {"green", {30, 160, 60}},   {"blue", {30, 70, 220}},
      {"yellow", {240, 200, 20}}, {"purple", {140, 50, 170}}, {"orange", {245, 130, 20}},
  };
  return *colors;
}

const char* ShapeKindName(ShapeKind kind) {
  switch (kind) {
    case ShapeKind::kCircle:
      return "circle";
    case ShapeKind::kSquare:
      return "square";
    case ShapeKind::kTriangle:
      return "triangle";
  }
  return "?";
}

std::string ShapeCaption(ShapeKind kind, int color, int row, int col) {
  const char* name = ShapeColors()[color].name;
  const bool vowel = std::string("aeiou").find(name[0]) != std::string::npos;
  return absl::StrCat(vowel ? "an " : "a ", name, " ", ShapeKindName(kind), " ",
                      kPlaces[row][col]);
}

std::vector<std::string> AllShapeCaptions() {
  std::vector<std::string> out;
  for (int k = 0; k < 3; ++k)
    for (int c = 0; c < static_cast<int>(ShapeColors().size()); ++c)
      for (int row = 0; row < 3; ++row)
        for (int col = 0; col < 3; ++col)
          out.push_back(ShapeCaption(static_cast<ShapeKind>(k), c, row, col));
  return out;
}

const std::vector<std::string>& ShapeQuestions() {
  static const std::vector<std::string>* q = new std::vector<std::string>{
      "Describe this image.",
      "What do you see in the picture?",
      "What shape is shown, and where is it?",
      "Describe the shape in this image.",
  };
  return *q;
}

ShapesSample MakeShapesSample(uint64_t seed, int64_t index, int size) {
  size = std::max(size, 28);
  Rng rng(Rng::Mix(seed, static_cast<uint64_t>(index)));
  ShapesSample s;
  DrawnShape& d = s.shape;
  d.kind = static_cast<ShapeKind>(rng.Uniform(3));
  d.color = static_cast<int>(rng.Uniform(ShapeColors().size()));
  d.row = static_cast<int>(rng.Uniform(3));
  d.col = static_cast<int>(rng.Uniform(3));
  const int cell = size / 3;
  d.radius = static_cast<int>(rng.Range(std::max(2, cell * 25 / 100), std::max(2, cell * 40 / 100)));
  // Jitter the centre inside its cell, keeping the shape within the cell.
  const int slack = std::max(0, cell / 2 - d.radius - 1);
  d.cx = d.col * cell + cell / 2 + static_cast<int>(rng.Range(-slack, slack));
  d.cy = d.row * cell + cell / 2 + static_cast<int>(rng.Range(-slack, slack));
  const uint8_t background = static_cast<uint8_t>(rng.Range(235, 255));

  s.image = RgbImage(size, size);
  std::fill(s.image.pixels.begin(), s.image.pixels.end(), background);
  const std::array<uint8_t, 3>& rgb = ShapeColors()[d.color].rgb;
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      if (Inside(d, x, y)) {  // pixel (cx, cy) itself is always covered
        std::copy(rgb.begin(), rgb.end(), s.image.at(x, y));
      }
    }
  }
  s.caption = ShapeCaption(d.kind, d.color, d.row, d.col);
  s.question = ShapeQuestions()[rng.Uniform(ShapeQuestions().size())];
  return s;
}

absl::Status WriteShapesDataset(const ShapesDatasetOptions& options) {
  if (options.out_dir.empty() || options.count < 0 || options.size < 28) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shapes dataset: need an output directory, count >= 0 and size >= 28 (got count ",
        options.count, ", size ", options.size, ")"));
  }
  std::string jsonl;
  for (int64_t i = 0; i < options.count; ++i) {
    const ShapesSample s = MakeShapesSample(options.seed, i, options.size);
    const std::string rel = absl::StrCat("images/", IndexName(i), ".png");
    absl::Status st = WritePngFile(s.image, JoinPath(options.out_dir, rel));
    if (!st.ok()) return st;
    nlohmann::ordered_json rec;
    rec["id"] = absl::StrCat("shapes-", IndexName(i));
    rec["image"] = rel;
    rec["conversations"] = nlohmann::ordered_json::array(
        {{{"from", "human"}, {"value", "<image>\n" + s.question}},
         {{"from", "gpt"}, {"value", s.caption}}});
    rec["shape"] = {{"kind", ShapeKindName(s.shape.kind)},
                    {"color", ShapeColors()[s.shape.color].name},
                    {"center", {s.shape.cx, s.shape.cy}},
                    {"radius", s.shape.radius}};
    jsonl += rec.dump();
    jsonl += '\n';
  }
  return WriteStringToFile(jsonl, JoinPath(options.out_dir, options.annotations_name));
}

}  // namespace data
}  // namespace dhp
