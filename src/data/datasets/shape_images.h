// The built-in synthetic image set (issue 14): rendered scenes of simple shapes with captions and questions whose
// answers need the image (how many, what colour, which shape, where), deterministic from a seed, so a small
// vision-language model can be trained and checked without any file. A scene is a size x size RGB image cut
// into a 2 x 2 grid of cells; each of 1 to 4 cells holds one shape (circle, square or triangle) of one colour
// (red, green, blue, yellow), jittered in size and position inside its cell, on a light grey background.
//
// Questions (each only where its answer is unique):
//   count    "how many circles?"                  -> "2"        (every kind; "0" is asked too)
//   colour   "what colour is the square?"         -> "red"      (exactly one square)
//   shape    "what shape is blue?"                -> "triangle" (exactly one blue shape)
//   where    "where is the circle?"               -> "top left" (exactly one circle)
// Held-out data is scenes of other seeds (split_seed): the same families, other compositions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/media/image.h"

namespace myriad {

enum class ShapeKind : uint8_t { kCircle, kSquare, kTriangle };
const char* shape_kind_name(ShapeKind k);  // "circle", "square", "triangle"

struct PlacedShape {
  ShapeKind kind = ShapeKind::kCircle;
  int colour = 0;                     // index into shape_colour_names()
  int cell = 0;                       // 0 top left, 1 top right, 2 bottom left, 3 bottom right
  double cx = 0, cy = 0, radius = 0;  // centre and half-size in pixels
};

struct ShapeQuestion {
  std::string family;  // "count", "colour", "shape", "where"
  std::string question;
  std::string answer;
};

struct ShapeScene {
  Image image;
  std::vector<PlacedShape> shapes;
  std::string caption;  // e.g. "a red circle top left and a blue square bottom right"
  std::vector<ShapeQuestion> questions;
};

const std::vector<std::string>& shape_colour_names();  // "red", "green", "blue", "yellow"
const char* shape_cell_name(int cell);                 // "top left", ...

// The scene of `seed`; size >= 16 pixels (kValue otherwise).
ShapeScene make_shape_scene(uint64_t seed, int64_t size = 56);

// Seeds of a split: train scenes use seeds 2i, held-out scenes 2i + 1, so the two never share a scene.
inline uint64_t split_seed(bool held_out, uint64_t i) {
  return 2 * i + (held_out ? 1 : 0);
}

}  // namespace myriad
