// The synthetic shape scenes (see shape_images.h).
#include "data/datasets/shape_images.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "core/error.h"

namespace myriad {

namespace {

constexpr std::array<std::array<uint8_t, 3>, 4> kColours = {
    {{220, 40, 40}, {40, 170, 60}, {40, 80, 220}, {230, 200, 40}}};
constexpr std::array<uint8_t, 3> kBackground = {220, 220, 220};

bool inside(const PlacedShape& s, double x, double y) {
  const double dx = x - s.cx, dy = y - s.cy, r = s.radius;
  switch (s.kind) {
    case ShapeKind::kCircle:
      return dx * dx + dy * dy <= r * r;
    case ShapeKind::kSquare:
      return std::abs(dx) <= 0.85 * r && std::abs(dy) <= 0.85 * r;  // about a circle's area
    case ShapeKind::kTriangle:  // apex up at (cx, cy - r), base at cy + r, half-width r there
      return dy <= r && dy >= -r && std::abs(dx) <= 0.5 * (dy + r);
  }
  return false;
}

std::string plural(ShapeKind k) {
  return std::string(shape_kind_name(k)) + "s";
}

}  // namespace

const char* shape_kind_name(ShapeKind k) {
  switch (k) {
    case ShapeKind::kCircle:
      return "circle";
    case ShapeKind::kSquare:
      return "square";
    case ShapeKind::kTriangle:
      return "triangle";
  }
  return "?";
}

const std::vector<std::string>& shape_colour_names() {
  static const std::vector<std::string> names = {"red", "green", "blue", "yellow"};
  return names;
}

const char* shape_cell_name(int cell) {
  static const char* names[] = {"top left", "top right", "bottom left", "bottom right"};
  return cell >= 0 && cell < 4 ? names[cell] : "?";
}

ShapeScene make_shape_scene(uint64_t seed, int64_t size) {
  MYRIAD_REQUIRE(size >= 16 && size <= 4096, kValue, "shape scene: size ", size, " must be in 16..4096 pixels");
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x5eed);
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  ShapeScene scene;
  std::array<int, 4> cells = {0, 1, 2, 3};
  std::shuffle(cells.begin(), cells.end(), rng);
  const int n = 1 + int(rng() % 4);
  std::sort(cells.begin(), cells.begin() + n);
  const double c = double(size) / 2.0;
  for (int i = 0; i < n; ++i) {
    PlacedShape s;
    s.kind = ShapeKind(rng() % 3);
    s.colour = int(rng() % kColours.size());
    s.cell = cells[size_t(i)];
    s.cx = (s.cell % 2) * c + c / 2 + uniform(-c / 8, c / 8);
    s.cy = (s.cell / 2) * c + c / 2 + uniform(-c / 8, c / 8);
    s.radius = uniform(0.25 * c, 0.38 * c);
    scene.shapes.push_back(s);
  }
  Image& img = scene.image;
  img.width = img.height = size;
  img.rgb.resize(size_t(size * size * 3));
  for (int64_t y = 0; y < size; ++y)
    for (int64_t x = 0; x < size; ++x) {
      std::array<uint8_t, 3> px = kBackground;
      for (const PlacedShape& s : scene.shapes)
        if (inside(s, double(x) + 0.5, double(y) + 0.5)) px = kColours[size_t(s.colour)];
      std::copy(px.begin(), px.end(), img.rgb.begin() + (y * size + x) * 3);
    }

  const auto& colours = shape_colour_names();
  for (size_t i = 0; i < scene.shapes.size(); ++i) {
    const PlacedShape& s = scene.shapes[i];
    scene.caption += (i == 0                         ? "a "
                      : i + 1 == scene.shapes.size() ? " and a "
                                                     : ", a ") +
                     colours[size_t(s.colour)] + " " + shape_kind_name(s.kind) + " " + shape_cell_name(s.cell);
  }
  for (int k = 0; k < 3; ++k) {
    const auto kind = ShapeKind(k);
    std::vector<const PlacedShape*> of;
    for (const PlacedShape& s : scene.shapes)
      if (s.kind == kind) of.push_back(&s);
    scene.questions.push_back({"count", "how many " + plural(kind) + "?", std::to_string(of.size())});
    if (of.size() == 1) {
      scene.questions.push_back(
          {"colour", std::string("what colour is the ") + shape_kind_name(kind) + "?", colours[size_t(of[0]->colour)]});
      scene.questions.push_back(
          {"where", std::string("where is the ") + shape_kind_name(kind) + "?", shape_cell_name(of[0]->cell)});
    }
  }
  for (size_t col = 0; col < colours.size(); ++col) {
    const PlacedShape* only = nullptr;
    int count = 0;
    for (const PlacedShape& s : scene.shapes)
      if (size_t(s.colour) == col) only = &s, ++count;
    if (count == 1)
      scene.questions.push_back({"shape", "what shape is " + colours[col] + "?", shape_kind_name(only->kind)});
  }
  return scene;
}

}  // namespace myriad
