// GIF decoding (see gif.h).
#include "data/media/gif.h"

#include <gif_lib.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace myriad {

namespace {

struct MemoryInput {
  const unsigned char* data;
  size_t size, at = 0;
};

int read_memory(GifFileType* gif, GifByteType* out, int n) {
  auto* in = static_cast<MemoryInput*>(gif->UserData);
  const size_t k = std::min(size_t(std::max(n, 0)), in->size - in->at);
  std::memcpy(out, in->data + in->at, k);
  in->at += k;
  return int(k);
}

// An open decoder on a byte range, closed on every path out.
class GifDecoder {
 public:
  GifDecoder(std::string_view bytes, const std::string& what)
      : in_{reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}, what_(what) {
    int error = 0;
    gif_ = DGifOpen(&in_, read_memory, &error);
    MYRIAD_REQUIRE(gif_ != nullptr, kValue, what, ": corrupt or truncated GIF header (", reason(error), ")");
  }
  ~GifDecoder() {
    int error = 0;
    DGifCloseFile(gif_, &error);
  }
  GifDecoder(const GifDecoder&) = delete;
  GifDecoder& operator=(const GifDecoder&) = delete;
  GifFileType* operator->() const { return gif_; }
  GifFileType* get() const { return gif_; }
  // Throws the file's last error when a giflib call failed.
  void check(int rc, const char* doing) const {
    MYRIAD_REQUIRE(rc == GIF_OK, kValue, what_, ": corrupt or truncated GIF (", doing, ": ", reason(gif_->Error), ")");
  }

 private:
  static const char* reason(int error) {
    const char* s = GifErrorString(error);
    return s ? s : "unknown error";
  }
  MemoryInput in_;
  const std::string& what_;
  GifFileType* gif_ = nullptr;
};

// Rows of an interlaced frame in the order they are stored: every 8th from 0, every 8th from 4, every 4th from 2,
// every 2nd from 1.
std::vector<int> row_order(int height, bool interlaced) {
  std::vector<int> rows;
  rows.reserve(size_t(height));
  if (!interlaced) {
    for (int y = 0; y < height; ++y) rows.push_back(y);
    return rows;
  }
  for (const auto& [start, step] : {std::pair{0, 8}, std::pair{4, 8}, std::pair{2, 4}, std::pair{1, 2}})
    for (int y = start; y < height; y += step) rows.push_back(y);
  return rows;
}

}  // namespace

void gif_screen_size(std::string_view bytes, const std::string& what, int64_t* width, int64_t* height) {
  const GifDecoder gif(bytes, what);
  *width = gif->SWidth;
  *height = gif->SHeight;
}

std::vector<Image> decode_gif(std::string_view bytes, const std::string& what, const GifLimits& limits) {
  const GifDecoder gif(bytes, what);
  const int W = gif->SWidth, H = gif->SHeight;
  MYRIAD_REQUIRE(W > 0 && H > 0, kValue, what, ": GIF screen of ", W, " x ", H, " has a zero size");
  const int64_t screen = int64_t(W) * int64_t(H);
  MYRIAD_REQUIRE(screen <= limits.max_pixels, kValue, what, ": GIF image of ", W, " x ", H, " = ", screen,
                 " pixels is over the limit of ", limits.max_pixels, " pixels");
  std::vector<Image> frames;
  std::vector<uint8_t> canvas(size_t(screen) * 3, 0), line;
  GraphicsControlBlock gcb{DISPOSAL_UNSPECIFIED, false, 0, NO_TRANSPARENT_COLOR};
  for (;;) {
    GifRecordType type = UNDEFINED_RECORD_TYPE;
    // A file that ends (or turns to garbage) after a whole frame, without the trailer, is common in the wild and
    // shown by viewers: its complete frames are kept. Anything cut inside a frame is refused below.
    const int rc = DGifGetRecordType(gif.get(), &type);
    if (rc != GIF_OK && !frames.empty()) break;
    gif.check(rc, "reading a record");
    if (type == TERMINATE_RECORD_TYPE) break;
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* block = nullptr;
      gif.check(DGifGetExtension(gif.get(), &code, &block), "reading an extension");
      if (code == GRAPHICS_EXT_FUNC_CODE && block != nullptr)
        gif.check(DGifExtensionToGCB(size_t(block[0]), block + 1, &gcb), "reading a graphics control block");
      while (block != nullptr) gif.check(DGifGetExtensionNext(gif.get(), &block), "reading an extension");
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;  // DGifGetRecordType refuses anything else
    gif.check(DGifGetImageDesc(gif.get()), "reading a frame descriptor");
    const GifImageDesc& d = gif->Image;
    const int64_t n = int64_t(frames.size()) + 1;
    MYRIAD_REQUIRE(n <= limits.max_frames, kValue, what, ": GIF of more than ", limits.max_frames,
                   " frames is over the limit of ", limits.max_frames, " frames");
    MYRIAD_REQUIRE(n * screen <= limits.max_pixels, kValue, what, ": GIF of ", n, " frames of ", W, " x ", H, " = ",
                   n * screen, " pixels is over the limit of ", limits.max_pixels, " pixels for all frames together");
    MYRIAD_REQUIRE(d.Left >= 0 && d.Top >= 0 && d.Width > 0 && d.Height > 0 && int64_t(d.Left) + d.Width <= W &&
                       int64_t(d.Top) + d.Height <= H,
                   kValue, what, ": GIF frame ", n, " of ", d.Width, " x ", d.Height, " at (", d.Left, ", ", d.Top,
                   ") lies outside the ", W, " x ", H, " screen");
    const ColorMapObject* map = d.ColorMap ? d.ColorMap : gif->SColorMap;
    MYRIAD_REQUIRE(map != nullptr && map->Colors != nullptr, kValue, what, ": GIF frame ", n,
                   " has no colour table (neither its own nor a global one)");
    const std::vector<uint8_t> before = gcb.DisposalMode == DISPOSE_PREVIOUS ? canvas : std::vector<uint8_t>();
    line.resize(size_t(d.Width));
    for (int y : row_order(d.Height, d.Interlace)) {
      gif.check(DGifGetLine(gif.get(), line.data(), d.Width), "decoding a frame");
      uint8_t* row = canvas.data() + (size_t(d.Top + y) * size_t(W) + size_t(d.Left)) * 3;
      for (int x = 0; x < d.Width; ++x) {
        const int index = line[size_t(x)];
        if (index == gcb.TransparentColor) continue;
        // An index past the table (a corrupt file) shows black, as most viewers show it.
        const GifColorType c = index < map->ColorCount ? map->Colors[index] : GifColorType{0, 0, 0};
        row[3 * x] = c.Red, row[3 * x + 1] = c.Green, row[3 * x + 2] = c.Blue;
      }
    }
    Image f;
    f.width = W;
    f.height = H;
    f.rgb = canvas;
    frames.push_back(std::move(f));
    if (limits.first_frame_only) break;
    if (gcb.DisposalMode == DISPOSE_BACKGROUND) {  // the frame's rectangle cleared (transparent: black here)
      for (int y = d.Top; y < d.Top + d.Height; ++y)
        std::fill_n(canvas.begin() + std::ptrdiff_t((size_t(y) * size_t(W) + size_t(d.Left)) * 3), size_t(d.Width) * 3,
                    uint8_t(0));
    } else if (gcb.DisposalMode == DISPOSE_PREVIOUS) {
      canvas = before;
    }
    gcb = GraphicsControlBlock{DISPOSAL_UNSPECIFIED, false, 0, NO_TRANSPARENT_COLOR};  // applies to one frame
  }
  MYRIAD_REQUIRE(!frames.empty(), kValue, what, ": GIF with no image in it (corrupt or truncated)");
  return frames;
}

}  // namespace myriad
