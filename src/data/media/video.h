// Short videos as the vision tower reads them (docs/vision.md "Video"): an animated GIF's frames, decoded by
// giflib (data/media/gif.h), with the frame count read from the file's block structure BEFORE any frame is decoded, so
// that a small file of many frames over a large canvas (a decompression bomb in time and memory) is refused up
// front; a still PNG, JPEG, GIF or WebP is a video of one frame. Then the frames the model sees: at most
// max_frames, spread evenly over the video.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/media/image.h"

namespace myriad {

struct VideoLimits {
  ImageLimits image;          // the encoded size; max_pixels caps width x height x frames, all frames together
  int64_t max_frames = 1024;  // frames a file may hold
};

struct Video {
  int64_t width = 0, height = 0;
  std::vector<Image> frames;  // all of the same size
};

// The frames of an animated GIF, or the one frame of a still image. `what` names the source in errors. One
// kValue error for what decode_image refuses, a frame count or frames x pixels over the limits, or a file whose
// frames giflib cannot decode.
Video decode_video(std::string_view bytes, const std::string& what, const VideoLimits& limits = {});

// Reads and decodes a file (kIo when it cannot be read).
Video read_video_file(const std::string& path, const VideoLimits& limits = {});

// Frame indices to keep of `frames`: all of them when at most `keep`, else `keep` spread evenly (the i-th of
// them at floor((i + 1/2) frames / keep)), in order.
std::vector<int64_t> sample_frames(int64_t frames, int64_t keep);

}  // namespace myriad
