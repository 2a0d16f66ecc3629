// Video decoding (see video.h).
#include "data/media/video.h"

#include <cstring>

#include "core/error.h"
#include "data/media/gif.h"

namespace myriad {

namespace {

// Frames of a GIF by its block structure (GIF89a: the header and logical screen, an optional global colour
// table, then extensions (0x21), image descriptors (0x2C, one per frame) and the trailer (0x3B)), each data block
// a chain of length-prefixed sub-blocks. Linear in the file; stops at the trailer, at a byte that starts no block
// or at the end (giflib then reports what is wrong). Counts descriptors only: nothing is decompressed.
int64_t gif_frame_count(std::string_view b) {
  auto byte = [&](size_t i) { return size_t(static_cast<unsigned char>(b[i])); };
  if (b.size() < 13) return 0;
  size_t at = 13;
  if (byte(10) & 0x80) at += 3 * (size_t(1) << ((byte(10) & 7) + 1));
  auto skip_sub_blocks = [&](size_t i) {
    while (i < b.size() && byte(i) != 0) i += byte(i) + 1;
    return i + 1;  // past the terminator
  };
  int64_t frames = 0;
  while (at < b.size()) {
    const size_t kind = byte(at);
    if (kind == 0x21) {
      at = skip_sub_blocks(at + 2);
    } else if (kind == 0x2C) {
      ++frames;
      if (at + 10 > b.size()) break;
      const size_t packed = byte(at + 9);
      at += 10;
      if (packed & 0x80) at += 3 * (size_t(1) << ((packed & 7) + 1));
      at = skip_sub_blocks(at + 1);  // past the LZW minimum code size
    } else {
      break;  // 0x3B, the trailer, or garbage
    }
  }
  return frames;
}

}  // namespace

Video decode_video(std::string_view bytes, const std::string& what, const VideoLimits& limits) {
  const ImageSize size = probe_image(bytes, what, limits.image);
  Video v;
  v.width = size.width;
  v.height = size.height;
  if (std::strcmp(size.format, "GIF") != 0) {
    v.frames.push_back(decode_image(bytes, what, limits.image));
    return v;
  }
  const int64_t frames = gif_frame_count(bytes);
  MYRIAD_REQUIRE(frames >= 1, kValue, what, ": GIF with no image in it (corrupt or truncated)");
  MYRIAD_REQUIRE(frames <= limits.max_frames, kValue, what, ": GIF of ", frames, " frames is over the limit of ",
                 limits.max_frames, " frames");
  MYRIAD_REQUIRE(frames * v.width * v.height <= limits.image.max_pixels, kValue, what, ": GIF of ", frames,
                 " frames of ", v.width, " x ", v.height, " = ", frames * v.width * v.height,
                 " pixels is over the limit of ", limits.image.max_pixels, " pixels for all frames together");
  if (frames == 1) {
    v.frames.push_back(decode_image(bytes, what, limits.image));
    return v;
  }
  // giflib checks the same limits frame by frame as it reads the descriptors (the count above is the up-front
  // refusal); frame timing is not kept: the frames are sampled evenly, not by time.
  GifLimits gl;
  gl.max_frames = limits.max_frames;
  gl.max_pixels = limits.image.max_pixels;
  v.frames = decode_gif(bytes, what, gl);
  return v;
}

Video read_video_file(const std::string& path, const VideoLimits& limits) {
  return decode_video(read_image_bytes(path, limits.image), path, limits);
}

std::vector<int64_t> sample_frames(int64_t frames, int64_t keep) {
  MYRIAD_REQUIRE(frames >= 0 && keep >= 1, kValue, "sample_frames: ", frames, " frames, keep ", keep);
  std::vector<int64_t> out;
  if (frames <= keep) {
    for (int64_t i = 0; i < frames; ++i) out.push_back(i);
    return out;
  }
  for (int64_t i = 0; i < keep; ++i) out.push_back((2 * i + 1) * frames / (2 * keep));
  return out;
}

}  // namespace myriad
