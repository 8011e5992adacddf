// Synthetic vision-language data: images of one coloured shape (circle, square or triangle) in
// one of nine places, with a caption that describes it ("a red circle on the left"), written as
// PNG files plus a LLaVA-style JSONL annotation file. Sample i depends only on (seed, i), so the
// first N samples are the same whatever the count.
//
// Output layout of WriteShapesDataset(out_dir):
//   out_dir/images/000000.png ...
//   out_dir/train.jsonl (annotations_name)   one record per line:
//     {"id": "shapes-000000", "image": "images/000000.png",
//      "conversations": [{"from": "human", "value": "<image>\nDescribe this image."},
//                        {"from": "gpt", "value": "a red circle on the left"}],
//      "shape": {"kind": "circle", "color": "red", "center": [x, y], "radius": r}}
//
// Thread-safety: pure functions; no shared mutable state.
#ifndef DHP_WORKER_DATA_SHAPES_GENERATOR_H_
#define DHP_WORKER_DATA_SHAPES_GENERATOR_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/data/image_io.h"

namespace dhp {
namespace data {

enum class ShapeKind { kCircle = 0, kSquare = 1, kTriangle = 2 };

struct ShapeColor {
  const char* name;
  std::array<uint8_t, 3> rgb;
};

// The palette, in a fixed order.
const std::vector<ShapeColor>& ShapeColors();
const char* ShapeKindName(ShapeKind kind);

struct DrawnShape {
  ShapeKind kind = ShapeKind::kCircle;
  int color = 0;    // index into ShapeColors()
  int row = 0;      // 0 top, 1 middle, 2 bottom
  int col = 0;      // 0 left, 1 centre, 2 right
  int cx = 0, cy = 0;  // centre pixel; always inside the shape
  int radius = 0;   // half the side / the circle radius, pixels
};

struct ShapesSample {
  RgbImage image;
  DrawnShape shape;
  std::string caption;   // e.g. "a red circle on the left"
  std::string question;  // e.g. "Describe this image."
};

// Caption of a shape: "a <colour> <kind> <place>", place per (row, col), e.g. "in the top left
// corner", "at the top", "on the left", "in the center".
std::string ShapeCaption(ShapeKind kind, int color, int row, int col);

// Every caption the generator can produce (for tokenizer training).
std::vector<std::string> AllShapeCaptions();

// The questions a sample may ask.
const std::vector<std::string>& ShapeQuestions();

// Sample `index` of the dataset with this seed, `size` x `size` pixels (size >= 28).
ShapesSample MakeShapesSample(uint64_t seed, int64_t index, int size);

struct ShapesDatasetOptions {
  std::string out_dir;
  int64_t count = 100;
  int size = 112;
  uint64_t seed = 0;
  std::string annotations_name = "train.jsonl";  // written in out_dir
};

// Writes the images and the annotations (see the file comment). Errors name the file.
absl::Status WriteShapesDataset(const ShapesDatasetOptions& options);

}  // namespace data
}  // namespace dhp

#endif  // DHP_WORKER_DATA_SHAPES_GENERATOR_H_
