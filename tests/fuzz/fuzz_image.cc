// Fuzz target: image bytes (any) decoded as a request's or a data file's image would be (JPEG by libjpeg-turbo, PNG
// by libpng, GIF by giflib, WebP by libwebp, the pixel cap from the header first), then resized and cut into patches
// under a small budget. Limits are lowered (256K pixels, 64 patches of 14 x 14) so every input stays fast and within
// the memory cap; the decoded image must hold exactly width x height x 3 bytes and the patches grid x 3 x 14 x 14
// values. The same bytes as a video (data/media/video.h: an animated GIF's frames, counted from its blocks before
// decoding; 64 frames and the same pixels over all of them at most): every frame of the video's size.
#include <cstdint>

#include "data/media/image.h"
#include "data/media/video.h"
#include "fuzz/support.h"

using namespace myriad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_accept_or_error([&] {
    ImageLimits limits;
    limits.max_pixels = 1 << 18;
    const Image img = decode_image(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", limits);
    MYRIAD_CHECK(img.width > 0 && img.height > 0 && int64_t(img.rgb.size()) == img.width * img.height * 3, "decoded ",
                 img.width, " x ", img.height, " with ", img.rgb.size(), " bytes");
    PatchOptions o;
    o.max_patches = 64;
    const ImagePatches p = image_to_patches(img, o);
    MYRIAD_CHECK(p.grid_h > 0 && p.grid_w > 0 && p.grid_h * p.grid_w <= 64 && p.grid_h % 2 == 0 && p.grid_w % 2 == 0,
                 "grid ", p.grid_h, " x ", p.grid_w);
    MYRIAD_CHECK(int64_t(p.values.size()) == p.grid_h * p.grid_w * 3 * 14 * 14, "patch values ", p.values.size());
    // K3's scale-down-and-pad: whole windows, at most 8 patches a side.
    o.fit = ImageFit::kScaleAndPad;
    o.max_side_patches = 8;
    const ImagePatches k = image_to_patches(img, o);
    MYRIAD_CHECK(k.grid_h > 0 && k.grid_w > 0 && k.grid_h <= 8 && k.grid_w <= 8 && k.grid_h % 2 == 0 &&
                     k.grid_w % 2 == 0 && int64_t(k.values.size()) == k.grid_h * k.grid_w * 3 * 14 * 14,
                 "padded grid ", k.grid_h, " x ", k.grid_w);
  });
  fuzz::expect_accept_or_error([&] {
    VideoLimits limits;
    limits.image.max_pixels = 1 << 18;
    limits.max_frames = 64;
    const Video v = decode_video(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", limits);
    MYRIAD_CHECK(!v.frames.empty() && int64_t(v.frames.size()) <= limits.max_frames, v.frames.size(), " frames");
    for (const Image& f : v.frames)
      MYRIAD_CHECK(f.width == v.width && f.height == v.height && int64_t(f.rgb.size()) == f.width * f.height * 3,
                   "frame ", f.width, " x ", f.height, " of a ", v.width, " x ", v.height, " video");
  });
  return 0;
}
