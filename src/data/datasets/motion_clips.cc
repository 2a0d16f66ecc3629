// The built-in motion clips (see motion_clips.h).
#include "data/datasets/motion_clips.h"

#include <algorithm>
#include <random>

#include "core/error.h"

namespace myriad {

namespace {

const uint8_t kColours[4][3] = {{220, 40, 40}, {40, 170, 60}, {40, 70, 220}, {230, 200, 30}};

}  // namespace

MotionClip make_motion_clip(uint64_t seed, int64_t size, int64_t frames) {
  MYRIAD_REQUIRE(size >= 16 && size <= 4096 && frames >= 2 && frames <= 64, kValue, "motion clip: size ", size,
                 " (16 to 4096) and frames ", frames, " (2 to 64)");
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x5EED);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  static const char* kDirections[4] = {"left", "right", "up", "down"};
  const int direction = int(uniform(0, 3)), colour = int(uniform(0, 3));
  const int64_t side = size / 4, room = size - side;
  const int64_t travel = uniform((room + 1) / 2, room);  // over the whole clip
  const int64_t across = uniform(0, room);               // the other coordinate, fixed
  const bool backwards = direction == 0 || direction == 2;
  const int64_t start = backwards ? uniform(travel, room) : uniform(0, room - travel);
  MotionClip clip;
  clip.direction = kDirections[direction];
  clip.colour = shape_colour_names()[size_t(colour)];
  clip.video.width = clip.video.height = size;
  for (int64_t f = 0; f < frames; ++f) {
    const int64_t along = start + (backwards ? -1 : 1) * (travel * f / (frames - 1));
    const int64_t x0 = direction < 2 ? along : across, y0 = direction < 2 ? across : along;
    Image im;
    im.width = im.height = size;
    im.rgb.assign(size_t(size * size * 3), 200);
    for (int64_t y = y0; y < y0 + side; ++y)
      for (int64_t x = x0; x < x0 + side; ++x) std::copy_n(kColours[colour], 3, im.rgb.data() + (y * size + x) * 3);
    clip.video.frames.push_back(std::move(im));
  }
  clip.questions = {{"motion", "which way does the square move?", clip.direction},
                    {"colour", "what colour is the square?", clip.colour}};
  return clip;
}

}  // namespace myriad
