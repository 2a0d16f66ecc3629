// Fuzz target: image bytes (any) decoded as a request's or a data file's image would be (PNG, JPEG, BMP, GIF via
// stb_image, the pixel cap from the header first), then resized and cut into patches under a small budget.
// Limits are lowered (256K pixels, 64 patches of 14 x 14) so every input stays fast and within the memory cap; the
// decoded image must hold exactly width x height x 3 bytes and the patches grid x 3 x 14 x 14 values.
#include <cstdint>

#include "data/image.h"
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
  });
  return 0;
}
