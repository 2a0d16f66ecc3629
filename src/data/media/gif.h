// GIF decoding with giflib (Debian's libgif), record by record: every frame's descriptor is read and checked (inside
// the logical screen, the frame and pixel caps) before its pixels are decompressed, and the frames are composited
// onto the logical screen as a viewer shows them (each frame's rectangle drawn over the canvas, its transparent
// index leaving what is below, then the frame's disposal: keep, clear to black, or restore the canvas before it).
// The canvas starts black; alpha is not kept. giflib decodes the LZW data; the compositing is the GIF89a rules. A
// file that ends after a whole frame without its trailer keeps the frames it has (viewers show them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/media/image.h"

namespace myriad {

struct GifLimits {
  int64_t max_frames = 1024;        // frames the file may hold
  int64_t max_pixels = 50'000'000;  // screen width x height x frames decoded, all frames together
  bool first_frame_only = false;    // stop after the first frame (a still image)
};

// The logical screen's size (giflib reads the header and the screen descriptor). kValue for what is not a GIF.
void gif_screen_size(std::string_view bytes, const std::string& what, int64_t* width, int64_t* height);

// Every frame (or the first), each the whole screen in RGB. One kValue error naming `what` for a corrupt or
// truncated file, a frame outside the screen, no frame at all, or a limit exceeded.
std::vector<Image> decode_gif(std::string_view bytes, const std::string& what, const GifLimits& limits);

}  // namespace myriad
