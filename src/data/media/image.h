// Images as the vision tower reads them: decoding (JPEG by libjpeg-turbo, PNG by libpng, WebP by libwebp, GIF's
// first frame by giflib; BMP is not read), the pixel cap checked from the header before any pixel is decoded
// (decompression bombs), and the native-resolution patching of docs/vision.md: brought to whole merge windows of
// patches under a patch budget (stretched, or as K3 does it, scaled down and padded), normalised, cut into patch rows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace myriad {

// 8-bit RGB, row-major, 3 bytes per pixel (alpha dropped, grey expanded).
struct Image {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

struct ImageLimits {
  int64_t max_bytes = int64_t(32) << 20;  // encoded size
  int64_t max_pixels = 50'000'000;        // width x height from the header, checked before decoding
};

// Decodes PNG, JPEG, GIF (the first frame, as a viewer composites it) or a still WebP. `what` names the source in
// errors (a path, a request field). One kValue error for an empty, oversized, unsupported, truncated or corrupt input,
// or dimensions over the cap.
Image decode_image(std::string_view bytes, const std::string& what, const ImageLimits& limits = {});

// The checks of decode_image up to the header (format, declared size, the pixel cap), and the size: what an image
// will decode to, without decoding it.
struct ImageSize {
  int64_t width = 0, height = 0;
  const char* format = "";  // "PNG", "JPEG", "GIF", "WebP"
};
ImageSize probe_image(std::string_view bytes, const std::string& what, const ImageLimits& limits = {});
// The encoded bytes of an image given by URL as OpenAI's image_url content parts carry it: a data: URI with base64
// data (RFC 2397, "data:image/png;base64,iVBOR..."), its media type an image/ type. Remote URLs (http, https) and
// every other scheme are refused: nothing is ever fetched (a server that fetches URLs for its clients is an SSRF
// hole). The base64 text's length is checked against limits.max_bytes before anything is decoded. `what` names
// the source in errors.
std::string image_bytes_from_url(std::string_view url, const std::string& what, const ImageLimits& limits = {});

// The image as PNG (stb_image_write), and as a data: URI holding that PNG.
std::string encode_png(const Image& image);
std::string png_data_uri(const Image& image);

// Reads and decodes a file (kIo when it cannot be read).
Image read_image_file(const std::string& path, const ImageLimits& limits = {});
// A regular file's bytes, at most limits.max_bytes (kIo when it cannot be read, kValue when it is larger).
std::string read_image_bytes(const std::string& path, const ImageLimits& limits = {});

// How an image is brought to whole merge windows of patches (docs/vision.md "Input").
//   kStretch     myriad's own: resized (aspect kept to within a window) to the largest whole number of windows per
//                side under the budget, never enlarged except to one window
//   kScaleAndPad K3's published preprocessing (navit_resize_image in its reference processor): scaled down only,
//                by min(1, sqrt(budget / (floor(w/p) floor(h/p))), side_limit p / w, side_limit p / h), each side
//                truncated to whole pixels, then padded on the right and at the bottom with black (pixel value 0,
//                before normalisation) up to a multiple of merge x patch pixels. Nothing is stretched.
enum class ImageFit : uint8_t { kStretch, kScaleAndPad };

struct PatchOptions {
  int64_t patch_size = 14;
  int64_t merge_h = 2, merge_w = 2;
  int64_t max_patches = 16384;  // per image (4096 merged tokens at 2 x 2): myriad's default budget (K3: in_patch_limit)
  int64_t max_side_patches = 512;  // kScaleAndPad: patches along one side at most (K3: patch_limit_on_one_side)
  ImageFit fit = ImageFit::kStretch;
  float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};  // per channel on [0, 1]: x -> (x - mean) / std
};

struct ImagePatches {
  int64_t grid_h = 0, grid_w = 0;  // patches per column and per row
  std::vector<float> values;       // [grid_h grid_w, 3 p p], each patch (channel, row, col), patches row-major
};

// Where an image's pixels go: resized to content_w x content_h, placed at the top left of the patch grid (the rest
// black: kScaleAndPad; kStretch fills the grid).
struct PatchPlan {
  int64_t content_w = 0, content_h = 0;
  int64_t grid_h = 0, grid_w = 0;
};

// The plan for an image of width x height under o (above). kValue when the budget cannot hold even one window
// (kStretch), or for a zero size.
PatchPlan plan_patches(int64_t width, int64_t height, const PatchOptions& o);
// Its grid alone.
void patch_grid_for(int64_t width, int64_t height, const PatchOptions& o, int64_t* grid_h, int64_t* grid_w);

// Resizes to the plan's content size (stb_image_resize: its default filters for kStretch; Catmull-Rom, the cubic
// with a = -0.5 that PIL's BICUBIC uses, for kScaleAndPad), pads, normalises and cuts the patches.
ImagePatches image_to_patches(const Image& image, const PatchOptions& o);

// A prompt's image markers expanded to the images' token runs: the i-th `placeholder` token of `ids` becomes
// tokens[i] copies of it (what the vision tower gives for image i). kValue when the markers and the images
// disagree in number ("2 image markers (id 11) in the prompt but 1 image").
std::vector<int32_t> expand_image_placeholders(const std::vector<int32_t>& ids, int32_t placeholder,
                                               const std::vector<int64_t>& tokens);

}  // namespace myriad
