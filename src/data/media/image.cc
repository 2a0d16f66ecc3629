// Image decoding and patching (see image.h). Each format by the library made for it, the decoders browsers and
// PIL trust, fuzzed upstream for years: JPEG by libjpeg-turbo (its TurboJPEG API), PNG by libpng (its simplified
// API), WebP by libwebp, GIF by giflib (data/media/gif.h). Debian's libstb (a 2022 snapshot) only resizes and writes
// PNGs: its JPEG and GIF decoders read out of bounds under myriad's fuzzing (issue 18), and its BMP decoder is of
// the same code, so BMP is not read (OpenAI's API takes PNG, JPEG, WebP and GIF). All linked, none vendored.
#include "data/media/image.h"

#include <png.h>
#include <stb_image_resize.h>
#include <stb_image_write.h>
#include <turbojpeg.h>
#include <webp/decode.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/base64.h"
#include "core/error.h"
#include "data/media/gif.h"

namespace myriad {

namespace {

// The formats accepted, by their signatures.
const char* format_of(std::string_view b) {
  auto starts = [&](const char* sig, size_t n) { return b.size() >= n && std::memcmp(b.data(), sig, n) == 0; };
  if (starts("\x89PNG\r\n\x1a\n", 8)) return "PNG";
  if (starts("\xff\xd8\xff", 3)) return "JPEG";
  if (starts("GIF87a", 6) || starts("GIF89a", 6)) return "GIF";
  if (starts("RIFF", 4) && b.size() >= 12 && std::memcmp(b.data() + 8, "WEBP", 4) == 0) return "WebP";
  return nullptr;
}

// The size PNG and GIF declare at fixed offsets of their first bytes (IHDR; the logical screen), read before the
// decoder's header reader so that a size it would refuse as too large is reported as what it is. JPEG's size lies
// in a frame marker found by scanning, WebP's in its first chunk: their libraries read them. Returns false when
// not available.
bool declared_size(std::string_view b, const char* format, int64_t* w, int64_t* h) {
  auto byte = [&](size_t i) { return int64_t(static_cast<unsigned char>(b[i])); };
  if (std::strcmp(format, "PNG") == 0 && b.size() >= 24) {
    *w = (byte(16) << 24) | (byte(17) << 16) | (byte(18) << 8) | byte(19);
    *h = (byte(20) << 24) | (byte(21) << 16) | (byte(22) << 8) | byte(23);
    return true;
  }
  if (std::strcmp(format, "GIF") == 0 && b.size() >= 10) {
    *w = byte(6) | (byte(7) << 8);
    *h = byte(8) | (byte(9) << 8);
    return true;
  }
  return false;
}

std::string first_bytes(std::string_view b) {
  std::ostringstream os;
  const size_t n = std::min<size_t>(b.size(), 8);
  for (size_t i = 0; i < n; ++i) {
    static const char* hex = "0123456789abcdef";
    const auto c = static_cast<unsigned char>(b[i]);
    os << (i ? " " : "") << hex[c >> 4] << hex[c & 15];
  }
  return os.str();
}

// One TurboJPEG decompressor, destroyed on every path out.
struct JpegDecoder {
  tjhandle handle = tjInitDecompress();
  JpegDecoder() { MYRIAD_REQUIRE(handle != nullptr, kIo, "libjpeg-turbo: cannot create a decompressor"); }
  ~JpegDecoder() { tjDestroy(handle); }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
};

struct JpegHeader {
  int width = 0, height = 0, colorspace = 0;
};

// The frame header's size and colour space (libjpeg-turbo reads markers up to the first scan; nothing decoded).
JpegHeader jpeg_header(JpegDecoder& d, std::string_view b, const std::string& what) {
  JpegHeader h;
  int subsampling = 0;
  const int rc = tjDecompressHeader3(d.handle, reinterpret_cast<const unsigned char*>(b.data()), b.size(), &h.width,
                                     &h.height, &subsampling, &h.colorspace);
  // A warning (stray bytes before a marker) is recovered from here as in the decode below.
  MYRIAD_REQUIRE(rc == 0 || tjGetErrorCode(d.handle) == TJERR_WARNING, kValue, what,
                 ": corrupt or truncated JPEG header (", tjGetErrorStr2(d.handle), ")");
  // Data that ends inside the markers reads as a tables-only stream: no frame, so no size.
  MYRIAD_REQUIRE(h.width > 0 && h.height > 0, kValue, what,
                 ": corrupt or truncated JPEG header (no frame header before the end of the data)");
  return h;
}

// Whole-image decode to 8-bit RGB. Grey and YCbCr come out as RGB from libjpeg-turbo; CMYK and YCCK (Adobe's,
// stored inverted, as Photoshop writes them) come out as CMYK and are mapped R = C K / 255 (likewise G, B), the
// conversion stb_image and PIL apply to such files. Progressive files are held to libjpeg-turbo's scan limit (a
// file of many tiny scans costs quadratic time). A recoverable warning (extraneous bytes before a marker) keeps
// the image, as browsers and PIL do; a file that ends early is refused, as PIL refuses it.
std::vector<uint8_t> decode_jpeg(std::string_view b, const std::string& what, int w, int h) {
  JpegDecoder d;
  const JpegHeader head = jpeg_header(d, b, what);
  const bool cmyk = head.colorspace == TJCS_CMYK || head.colorspace == TJCS_YCCK;
  const int channels = cmyk ? 4 : 3;
  std::vector<uint8_t> px(size_t(w) * size_t(h) * size_t(channels));
  const int rc = tjDecompress2(d.handle, reinterpret_cast<const unsigned char*>(b.data()), b.size(), px.data(), w, 0, h,
                               cmyk ? TJPF_CMYK : TJPF_RGB, TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS);
  if (rc != 0) {
    const std::string reason = tjGetErrorStr2(d.handle);
    const bool warning = tjGetErrorCode(d.handle) == TJERR_WARNING;
    MYRIAD_REQUIRE(warning && reason.find("Premature end") == std::string::npos, kValue, what,
                   ": corrupt or truncated JPEG image (", reason, ")");
  }
  if (!cmyk) return px;
  std::vector<uint8_t> rgb(size_t(w) * size_t(h) * 3);
  for (size_t i = 0, n = size_t(w) * size_t(h); i < n; ++i) {
    const unsigned k = px[4 * i + 3];
    for (size_t c = 0; c < 3; ++c) rgb[3 * i + c] = uint8_t((px[4 * i + c] * k + 127) / 255);
  }
  return rgb;
}

// libpng's simplified API: the header first (png_image_begin_read, size and format only), then the pixels as
// 8-bit sRGB RGBA with the alpha byte dropped afterwards (the colour values as stored, not composited onto a
// background: what the tower saw from stb before). Palette, grey, 16-bit, tRNS and gAMA are libpng's to apply.
struct PngReader {
  png_image image{};
  PngReader() { image.version = PNG_IMAGE_VERSION; }
  ~PngReader() { png_image_free(&image); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
};

void png_header(PngReader& r, std::string_view b, const std::string& what) {
  MYRIAD_REQUIRE(png_image_begin_read_from_memory(&r.image, b.data(), b.size()) != 0, kValue, what,
                 ": corrupt or truncated PNG header (", r.image.message, ")");
}

std::vector<uint8_t> decode_png(std::string_view b, const std::string& what, int w, int h) {
  PngReader r;
  png_header(r, b, what);
  MYRIAD_REQUIRE(int64_t(r.image.width) == w && int64_t(r.image.height) == h, kValue, what,
                 ": PNG header changed between reads");
  r.image.format = PNG_FORMAT_RGBA;
  std::vector<uint8_t> rgba(size_t(w) * size_t(h) * 4);
  MYRIAD_REQUIRE(png_image_finish_read(&r.image, nullptr, rgba.data(), 0, nullptr) != 0, kValue, what,
                 ": corrupt or truncated PNG image (", r.image.message, ")");
  std::vector<uint8_t> rgb(size_t(w) * size_t(h) * 3);
  for (size_t i = 0, n = size_t(w) * size_t(h); i < n; ++i) std::memcpy(&rgb[3 * i], &rgba[4 * i], 3);
  return rgb;
}

// WebP through libwebp: the features (size, animation) from the first chunks, then the whole still image as RGB
// (alpha dropped, not composited). Animated WebP is refused: its frames need the demuxer (send a GIF).
WebPBitstreamFeatures webp_features(std::string_view b, const std::string& what) {
  WebPBitstreamFeatures f{};
  const VP8StatusCode rc = WebPGetFeatures(reinterpret_cast<const uint8_t*>(b.data()), b.size(), &f);
  MYRIAD_REQUIRE(rc == VP8_STATUS_OK, kValue, what, ": corrupt or truncated WebP header (libwebp status ", int(rc),
                 ")");
  MYRIAD_REQUIRE(!f.has_animation, kValue, what,
                 ": animated WebP is not read (a still WebP is; an animation can be sent as a GIF)");
  return f;
}

std::vector<uint8_t> decode_webp(std::string_view b, const std::string& what, int w, int h) {
  int dw = 0, dh = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> px(
      WebPDecodeRGB(reinterpret_cast<const uint8_t*>(b.data()), b.size(), &dw, &dh), WebPFree);
  MYRIAD_REQUIRE(px != nullptr, kValue, what, ": corrupt or truncated WebP image");
  MYRIAD_REQUIRE(dw == w && dh == h, kValue, what, ": WebP image decoded as ", dw, " x ", dh, " but its header says ",
                 w, " x ", h);
  return {px.get(), px.get() + size_t(w) * size_t(h) * 3};
}

// The size from the format's own header reader.
void header_size(std::string_view b, const char* format, const std::string& what, int* w, int* h) {
  if (std::strcmp(format, "JPEG") == 0) {
    JpegDecoder d;
    const JpegHeader head = jpeg_header(d, b, what);
    *w = head.width;
    *h = head.height;
    return;
  }
  if (std::strcmp(format, "PNG") == 0) {
    PngReader r;
    png_header(r, b, what);
    MYRIAD_REQUIRE(r.image.width <= uint32_t(INT32_MAX) && r.image.height <= uint32_t(INT32_MAX), kValue, what,
                   ": PNG image declares ", r.image.width, " x ", r.image.height, " pixels");
    *w = int(r.image.width);
    *h = int(r.image.height);
    return;
  }
  if (std::strcmp(format, "WebP") == 0) {
    const WebPBitstreamFeatures f = webp_features(b, what);
    *w = f.width;
    *h = f.height;
    return;
  }
  int64_t sw = 0, sh = 0;
  gif_screen_size(b, what, &sw, &sh);
  *w = int(sw);
  *h = int(sh);
}

}  // namespace

ImageSize probe_image(std::string_view bytes, const std::string& what, const ImageLimits& limits) {
  MYRIAD_REQUIRE(!bytes.empty(), kValue, what, ": empty image data");
  MYRIAD_REQUIRE(int64_t(bytes.size()) <= limits.max_bytes, kValue, what, ": image of ", bytes.size(),
                 " bytes is over the limit of ", limits.max_bytes, " bytes");
  MYRIAD_REQUIRE(bytes.size() <= size_t(INT32_MAX), kValue, what, ": image data too large");
  const char* format = format_of(bytes);
  MYRIAD_REQUIRE(format != nullptr, kValue, what, ": not a PNG, JPEG, GIF or WebP image (first bytes ",
                 first_bytes(bytes), ")");
  int64_t dw64 = 0, dh64 = 0;
  if (declared_size(bytes, format, &dw64, &dh64)) {
    // Each side first: two 32-bit sides can overflow their product.
    MYRIAD_REQUIRE(dw64 <= limits.max_pixels && dh64 <= limits.max_pixels && dw64 * dh64 <= limits.max_pixels, kValue,
                   what, ": ", format, " image declares ", dw64, " x ", dh64, " pixels, over the limit of ",
                   limits.max_pixels, " pixels");
  }
  int w = 0, h = 0;
  // The header alone first: a small file may declare a huge image (a decompression bomb).
  header_size(bytes, format, what, &w, &h);
  MYRIAD_REQUIRE(w > 0 && h > 0, kValue, what, ": ", format, " image has a zero size (", w, " x ", h, ")");
  MYRIAD_REQUIRE(int64_t(w) * int64_t(h) <= limits.max_pixels, kValue, what, ": ", format, " image of ", w, " x ", h,
                 " = ", int64_t(w) * int64_t(h), " pixels is over the limit of ", limits.max_pixels, " pixels");
  return {w, h, format};
}

Image decode_image(std::string_view bytes, const std::string& what, const ImageLimits& limits) {
  const ImageSize size = probe_image(bytes, what, limits);
  const int w = int(size.width), h = int(size.height);
  const char* format = size.format;
  Image img;
  img.width = w;
  img.height = h;
  if (std::strcmp(format, "JPEG") == 0) {
    img.rgb = decode_jpeg(bytes, what, w, h);
    return img;
  }
  if (std::strcmp(format, "PNG") == 0) {
    img.rgb = decode_png(bytes, what, w, h);
    return img;
  }
  if (std::strcmp(format, "WebP") == 0) {
    img.rgb = decode_webp(bytes, what, w, h);
    return img;
  }
  GifLimits first;
  first.max_frames = 1;
  first.max_pixels = limits.max_pixels;
  first.first_frame_only = true;
  img.rgb = std::move(decode_gif(bytes, what, first).front().rgb);
  return img;
}

std::string image_bytes_from_url(std::string_view url, const std::string& what, const ImageLimits& limits) {
  auto starts_nocase = [&](std::string_view prefix) {
    if (url.size() < prefix.size()) return false;
    for (size_t i = 0; i < prefix.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(url[i])) != prefix[i]) return false;
    return true;
  };
  MYRIAD_REQUIRE(!starts_nocase("http://") && !starts_nocase("https://"), kValue, what,
                 ": remote image URLs are not fetched (no server-side fetching); send the image inline as a "
                 "data: URI (data:image/png;base64,...)");
  MYRIAD_REQUIRE(starts_nocase("data:"), kValue, what, ": an image URL must be a data: URI (data:image/png;base64,...)",
                 ", got '", url.substr(0, std::min<size_t>(url.size(), 32)), url.size() > 32 ? "...'" : "'");
  const size_t comma = url.find(',');
  MYRIAD_REQUIRE(comma != std::string_view::npos, kValue, what, ": data: URI without a ',' before its data");
  const std::string_view head = url.substr(5, comma - 5), data = url.substr(comma + 1);
  MYRIAD_REQUIRE(head.size() >= 7 && head.substr(head.size() - 7) == ";base64", kValue, what,
                 ": the data: URI's data must be base64 (data:image/png;base64,...), got the header 'data:", head, "'");
  const std::string_view type = head.substr(0, head.find(';'));
  MYRIAD_REQUIRE(type.substr(0, 6) == "image/", kValue, what, ": the data: URI's media type '", type,
                 "' is not an image type (image/png, image/jpeg, ...)");
  // 4 characters per 3 bytes: a payload whose decoded size would be over the cap is refused undecoded.
  MYRIAD_REQUIRE(int64_t(data.size()) / 4 * 3 <= limits.max_bytes, kValue, what, ": base64 image data of ", data.size(),
                 " characters is over the limit of ", limits.max_bytes, " bytes");
  std::string bytes;
  MYRIAD_REQUIRE(base64_decode(data, bytes), kValue, what, ": the data: URI's data is not valid base64");
  return bytes;
}

std::string encode_png(const Image& image) {
  MYRIAD_REQUIRE(image.width > 0 && image.height > 0 && int64_t(image.rgb.size()) == image.width * image.height * 3,
                 kValue, "encode_png: image of ", image.width, " x ", image.height, " holds ", image.rgb.size(),
                 " bytes, not width x height x 3");
  std::string out;
  const auto append = [](void* ctx, void* data, int size) {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), size_t(size));
  };
  MYRIAD_REQUIRE(stbi_write_png_to_func(append, &out, int(image.width), int(image.height), 3, image.rgb.data(),
                                        int(image.width * 3)) == 1,
                 kValue, "encode_png: stb_image_write failed");
  return out;
}

std::string png_data_uri(const Image& image) {
  return "data:image/png;base64," + base64_encode(encode_png(image));
}

std::string read_image_bytes(const std::string& path, const ImageLimits& limits) {
  // A device or a pipe (/dev/stdin, a FIFO) could block or never end: image files are regular files.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  MYRIAD_REQUIRE(!ec && st.type() != std::filesystem::file_type::not_found, kIo, path, ": cannot open image file");
  MYRIAD_REQUIRE(st.type() == std::filesystem::file_type::regular, kIo, path,
                 ": not a regular file (an image is read whole from a file)");
  std::ifstream in(path, std::ios::binary);
  MYRIAD_REQUIRE(in.good(), kIo, path, ": cannot open image file");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  MYRIAD_REQUIRE(size >= 0, kIo, path, ": cannot read image file");
  MYRIAD_REQUIRE(int64_t(size) <= limits.max_bytes, kValue, path, ": image of ", int64_t(size),
                 " bytes is over the limit of ", limits.max_bytes, " bytes");
  std::string bytes(size_t(size), '\0');
  in.seekg(0);
  in.read(bytes.data(), size);
  MYRIAD_REQUIRE(in.good() || size == 0, kIo, path, ": cannot read image file");
  return bytes;
}

Image read_image_file(const std::string& path, const ImageLimits& limits) {
  return decode_image(read_image_bytes(path, limits), path, limits);
}

PatchPlan plan_patches(int64_t width, int64_t height, const PatchOptions& o) {
  MYRIAD_REQUIRE(o.patch_size > 0 && o.merge_h > 0 && o.merge_w > 0, kValue, "patching: patch size ", o.patch_size,
                 " and merge window ", o.merge_h, " x ", o.merge_w, " must be positive");
  MYRIAD_REQUIRE(width > 0 && height > 0, kValue, "patching: image of ", width, " x ", height, " has a zero size");
  PatchPlan plan;
  if (o.fit == ImageFit::kScaleAndPad) {
    // navit_resize_image's arithmetic, in doubles as Python computes it (the same IEEE operations: equal results).
    MYRIAD_REQUIRE(o.max_patches > 0 && o.max_side_patches > 0, kValue, "patching: patch budget ", o.max_patches,
                   " and side limit ", o.max_side_patches, " must be positive");
    const int64_t p = o.patch_size, side = o.max_side_patches * p;
    const double s1 =
        std::sqrt(double(o.max_patches) / (std::max(1.0, double(width / p)) * std::max(1.0, double(height / p))));
    const double scale = std::min({1.0, s1, double(side) / double(width), double(side) / double(height)});
    plan.content_w = std::min(side, std::max<int64_t>(1, int64_t(double(width) * scale)));
    plan.content_h = std::min(side, std::max<int64_t>(1, int64_t(double(height) * scale)));
    const int64_t fw = o.merge_w * p, fh = o.merge_h * p;
    plan.grid_w = (plan.content_w + (fw - plan.content_w % fw) % fw) / p;
    plan.grid_h = (plan.content_h + (fh - plan.content_h % fh) % fh) / p;
    MYRIAD_REQUIRE(plan.grid_w <= o.max_side_patches && plan.grid_h <= o.max_side_patches, kValue, "patching: ", width,
                   " x ", height, " pads to ", plan.grid_w, " x ", plan.grid_h, " patches, over the side limit ",
                   o.max_side_patches, " (the limit times the patch size must be a whole number of merge windows)");
    return plan;
  }
  MYRIAD_REQUIRE(o.max_patches >= o.merge_h * o.merge_w, kValue, "patching: a budget of ", o.max_patches,
                 " patches cannot hold one ", o.merge_h, " x ", o.merge_w, " merge window");
  const double p = double(o.patch_size);
  const double scale = std::min(1.0, std::sqrt(double(o.max_patches) * p * p / (double(width) * double(height))));
  // Windows per side (a window is merge x patch pixels), at least one.
  int64_t wh = std::max<int64_t>(1, int64_t(std::floor(double(height) * scale / (p * double(o.merge_h)))));
  int64_t ww = std::max<int64_t>(1, int64_t(std::floor(double(width) * scale / (p * double(o.merge_w)))));
  // Rounding a very thin image's short side up to one window can overshoot the budget: shrink the long side.
  while (wh * o.merge_h * ww * o.merge_w > o.max_patches) {
    if (wh * o.merge_h >= ww * o.merge_w && wh > 1)
      --wh;
    else
      --ww;
  }
  plan.grid_h = wh * o.merge_h;
  plan.grid_w = ww * o.merge_w;
  plan.content_h = plan.grid_h * o.patch_size;
  plan.content_w = plan.grid_w * o.patch_size;
  return plan;
}

void patch_grid_for(int64_t width, int64_t height, const PatchOptions& o, int64_t* grid_h, int64_t* grid_w) {
  const PatchPlan plan = plan_patches(width, height, o);
  *grid_h = plan.grid_h;
  *grid_w = plan.grid_w;
}

ImagePatches image_to_patches(const Image& image, const PatchOptions& o) {
  MYRIAD_REQUIRE(int64_t(image.rgb.size()) == image.width * image.height * 3, kValue, "patching: image of ",
                 image.width, " x ", image.height, " holds ", image.rgb.size(), " bytes, not width x height x 3");
  ImagePatches out;
  const PatchPlan plan = plan_patches(image.width, image.height, o);
  out.grid_h = plan.grid_h;
  out.grid_w = plan.grid_w;
  const int64_t p = o.patch_size, W = plan.content_w, H = plan.content_h;
  std::vector<uint8_t> resized;
  const uint8_t* px = image.rgb.data();
  if (H != image.height || W != image.width) {
    resized.resize(size_t(H * W * 3));
    const int ok =
        o.fit == ImageFit::kStretch
            ? stbir_resize_uint8(image.rgb.data(), int(image.width), int(image.height), 0, resized.data(), int(W),
                                 int(H), 0, 3)
            : stbir_resize_uint8_generic(image.rgb.data(), int(image.width), int(image.height), 0, resized.data(),
                                         int(W), int(H), 0, 3, STBIR_ALPHA_CHANNEL_NONE, 0, STBIR_EDGE_CLAMP,
                                         STBIR_FILTER_CATMULLROM, STBIR_COLORSPACE_LINEAR, nullptr);
    MYRIAD_REQUIRE(ok == 1, kValue, "patching: resizing ", image.width, " x ", image.height, " to ", W, " x ", H,
                   " failed");
    px = resized.data();
  }
  const int64_t row = 3 * p * p;
  out.values.resize(size_t(out.grid_h * out.grid_w * row));
  float inv[3], shift[3];
  for (int ch = 0; ch < 3; ++ch) inv[ch] = 1.0f / (255.0f * o.std[ch]), shift[ch] = o.mean[ch] / o.std[ch];
  for (int64_t r = 0; r < out.grid_h; ++r)
    for (int64_t c = 0; c < out.grid_w; ++c) {
      float* dst = out.values.data() + (r * out.grid_w + c) * row;
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t y = 0; y < p; ++y)
          for (int64_t x = 0; x < p; ++x) {
            const int64_t iy = r * p + y, ix = c * p + x;
            const uint8_t v = iy < H && ix < W ? px[(iy * W + ix) * 3 + ch] : 0;  // the padding is black
            dst[(ch * p + y) * p + x] = float(v) * inv[ch] - shift[ch];
          }
    }
  return out;
}

std::vector<int32_t> expand_image_placeholders(const std::vector<int32_t>& ids, int32_t placeholder,
                                               const std::vector<int64_t>& tokens) {
  const int64_t markers = std::count(ids.begin(), ids.end(), placeholder);
  MYRIAD_REQUIRE(markers == int64_t(tokens.size()), kValue, markers, " image marker", markers == 1 ? "" : "s", " (id ",
                 placeholder, ") in the prompt but ", tokens.size(), " image", tokens.size() == 1 ? "" : "s");
  std::vector<int32_t> out;
  size_t image = 0;
  for (int32_t id : ids) {
    if (id != placeholder) {
      out.push_back(id);
      continue;
    }
    out.insert(out.end(), size_t(tokens[image++]), placeholder);
  }
  return out;
}

}  // namespace myriad
