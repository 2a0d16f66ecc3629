// The built-in synthetic video set: a short clip of a coloured square moving in a straight line (left, right, up or
// down) over a few frames on a light grey background, with questions whose answer needs the frames in order
// ("which way does the square move?": the frames averaged, as sd2_tpool averages them, show a streak that is the
// same for left and right) or any one frame ("what colour is the square?"). Deterministic from a seed; held-out
// clips use other seeds (split_seed). The square's side is a quarter of the frame; it moves by 1/2 to 1 times the
// room it has over the clip, from a random start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/datasets/shape_images.h"
#include "data/media/video.h"

namespace myriad {

struct MotionClip {
  Video video;
  std::string direction;                 // "left", "right", "up", "down"
  std::string colour;                    // one of shape_colour_names()
  std::vector<ShapeQuestion> questions;  // families "motion" and "colour"
};

// The clip of `seed`: `frames` frames (2 to 64) of size x size pixels (size >= 16); kValue otherwise.
MotionClip make_motion_clip(uint64_t seed, int64_t size = 56, int64_t frames = 4);

}  // namespace myriad
