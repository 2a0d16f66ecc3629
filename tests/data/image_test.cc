// Image decoding and patching (data/media/image.h), IDX arrays (data/datasets/idx.h). Images are written with
// stb_image_write (Debian's libstb), an encoder independent of the decoders (libjpeg-turbo, libpng, giflib, libwebp):
// PNG is lossless, so the decoded pixels must equal the written ones exactly; JPEG within a small error. GIF bytes are
// written out by hand from the format; WebP by libwebp's own encoder (lossless: exact).
#include "data/media/image.h"

#include <gtest/gtest.h>
#include <stb_image_write.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <webp/encode.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "core/base64.h"
#include "core/error.h"
#include "data/datasets/idx.h"
#include "data/datasets/shape_images.h"

namespace myriad {
namespace {

void append(void* ctx, void* data, int size) {
  static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), size_t(size));
}

std::vector<uint8_t> random_rgb(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(size_t(w * h * 3));
  for (auto& v : px) v = uint8_t(rng() & 255);
  return px;
}

std::string png(int w, int h, const std::vector<uint8_t>& px) {
  std::string out;
  EXPECT_EQ(stbi_write_png_to_func(append, &out, w, h, 3, px.data(), w * 3), 1);
  return out;
}

std::string error_of(const std::string& bytes, const ImageLimits& limits = {}) {
  try {
    decode_image(bytes, "request.image", limits);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    return e.what();
  }
  return "no error";
}

TEST(Image, PngAndWebpDecodeToTheWrittenPixels) {
  const int w = 37, h = 21;
  const std::vector<uint8_t> px = random_rgb(w, h, 1);
  const Image a = decode_image(png(w, h, px), "a.png");
  EXPECT_EQ(a.width, w);
  EXPECT_EQ(a.height, h);
  EXPECT_EQ(a.rgb, px);
  uint8_t* out = nullptr;
  const size_t n = WebPEncodeLosslessRGB(px.data(), w, h, w * 3, &out);
  ASSERT_GT(n, 0u);
  const std::string lossless(reinterpret_cast<const char*>(out), n);
  WebPFree(out);
  const Image b = decode_image(lossless, "a.webp");
  EXPECT_EQ(b.width, w);
  EXPECT_EQ(b.height, h);
  EXPECT_EQ(b.rgb, px);
  EXPECT_NE(error_of(lossless.substr(0, lossless.size() / 2)).find("request.image: corrupt or truncated WebP"),
            std::string::npos);
  // BMP is not read (stb's decoder was the only one at hand): one error naming the formats that are.
  std::string bmp;
  ASSERT_EQ(stbi_write_bmp_to_func(append, &bmp, w, h, 3, px.data()), 1);
  EXPECT_NE(error_of(bmp).find("not a PNG, JPEG, GIF or WebP image (first bytes 42 4d"), std::string::npos);
}

TEST(Image, JpegDecodesCloseToTheWrittenPixels) {
  const int w = 32, h = 16;
  std::vector<uint8_t> px(size_t(w * h * 3));
  for (int y = 0; y < h; ++y)  // smooth: JPEG keeps it to a few levels
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) px[size_t((y * w + x) * 3 + c)] = uint8_t(40 + 4 * x + 6 * y + 20 * c);
  std::string jpg;
  ASSERT_EQ(stbi_write_jpg_to_func(append, &jpg, w, h, 3, px.data(), 100), 1);
  const Image img = decode_image(jpg, "a.jpg");
  ASSERT_EQ(img.rgb.size(), px.size());
  double worst = 0;
  for (size_t i = 0; i < px.size(); ++i) worst = std::max(worst, std::abs(double(img.rgb[i]) - double(px[i])));
  EXPECT_LE(worst, 8.0);  // quality 100 with 4:2:0 chroma on a smooth ramp
}

// The JPEG variants a photo library holds, and damaged files. The decoder is libjpeg-turbo; the grey file comes from
// stb_image_write, the CMYK one from libjpeg-turbo's encoder (stb writes no CMYK).
TEST(Image, JpegGreyCmykAndDamagedFiles) {
  const int w = 32, h = 16;
  std::vector<uint8_t> grey(size_t(w * h));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) grey[size_t(y * w + x)] = uint8_t(30 + 5 * x + 4 * y);
  std::string jpg;
  ASSERT_EQ(stbi_write_jpg_to_func(append, &jpg, w, h, 1, grey.data(), 100), 1);
  const Image g = decode_image(jpg, "grey.jpg");
  ASSERT_EQ(g.rgb.size(), size_t(w * h * 3));
  double worst = 0;
  for (size_t i = 0; i < grey.size(); ++i)
    for (size_t c = 0; c < 3; ++c) worst = std::max(worst, std::abs(double(g.rgb[3 * i + c]) - double(grey[i])));
  EXPECT_LE(worst, 4.0);  // one channel, no chroma subsampling: quantisation only

  // Adobe CMYK is stored inverted: the RGB a viewer shows is C K / 255 per channel. A smooth ramp of all four.
  std::vector<uint8_t> cmyk(size_t(w * h * 4));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 4; ++c)
        cmyk[size_t((y * w + x) * 4 + c)] = uint8_t(c == 3 ? 150 + 3 * x : 40 + 5 * x + 6 * y + 15 * c);
  tjhandle enc = tjInitCompress();
  ASSERT_NE(enc, nullptr);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  ASSERT_EQ(tjCompress2(enc, cmyk.data(), w, 0, h, TJPF_CMYK, &out, &out_size, TJSAMP_444, 100, 0), 0);
  const std::string cmyk_jpg(reinterpret_cast<const char*>(out), out_size);
  tjFree(out);
  tjDestroy(enc);
  const Image c = decode_image(cmyk_jpg, "cmyk.jpg");
  ASSERT_EQ(c.rgb.size(), size_t(w * h * 3));
  worst = 0;
  for (size_t i = 0; i < size_t(w * h); ++i)
    for (size_t ch = 0; ch < 3; ++ch)
      worst = std::max(worst, std::abs(double(c.rgb[3 * i + ch]) - cmyk[4 * i + ch] * cmyk[4 * i + 3] / 255.0));
  EXPECT_LE(worst, 4.0);  // quality 100, 4:4:4: a level or two per channel, as the grey file
  // Taking the CMYK bytes as RGB (no conversion) would be off by (255 - K) C / 255, up to 60 levels here.

  // A file that ends early is refused (PIL refuses it too); bytes before a marker are a warning libjpeg-turbo
  // recovers from, and the image is kept, equal to the clean file's.
  std::string noisy;  // noise, so that half of the file is entropy-coded data, not tables
  ASSERT_EQ(stbi_write_jpg_to_func(append, &noisy, 64, 64, 3, random_rgb(64, 64, 6).data(), 90), 1);
  const std::string e = error_of(noisy.substr(0, noisy.size() / 2));
  EXPECT_NE(e.find("request.image: corrupt or truncated JPEG image (Premature end of JPEG file)"), std::string::npos)
      << e;
  ASSERT_EQ(jpg.substr(jpg.size() - 2), "\xff\xd9");
  const std::string extra = jpg.substr(0, jpg.size() - 2) + std::string("\x12\x34", 2) + "\xff\xd9";
  EXPECT_EQ(decode_image(extra, "extra.jpg").rgb, g.rgb);
  EXPECT_NE(error_of(std::string("\xff\xd8\xff\xe0", 4)).find("corrupt or truncated JPEG header (no frame header"),
            std::string::npos);
}

TEST(Image, PngWithAlphaKeepsTheStoredColours) {
  const int w = 9, h = 7;
  std::vector<uint8_t> rgba(size_t(w * h * 4));
  std::mt19937 rng(5);
  for (auto& v : rgba) v = uint8_t(rng() & 255);
  std::string bytes;
  ASSERT_EQ(stbi_write_png_to_func(append, &bytes, w, h, 4, rgba.data(), w * 4), 1);
  std::vector<uint8_t> rgb;
  for (size_t i = 0; i < size_t(w * h); ++i) rgb.insert(rgb.end(), &rgba[4 * i], &rgba[4 * i + 3]);
  EXPECT_EQ(decode_image(bytes, "a.png").rgb, rgb);  // not composited onto a background: the values as stored
}

TEST(Image, GifFirstFrame) {
  // GIF89a, 2 x 1, a 2-colour global table (red, blue), one image of pixels [0, 1], LZW minimum code size 2:
  // codes clear(4) 0 1 end(5) in 3 bits each, packed from the least significant bit: 0x44 0x0a.
  const std::string gif(
      "GIF89a\x02\x00\x01\x00\x80\x00\x00"
      "\xff\x00\x00\x00\x00\xff"
      ",\x00\x00\x00\x00\x02\x00\x01\x00\x00"
      "\x02\x02\x44\x0a\x00;",
      35);
  const Image img = decode_image(gif, "a.gif");
  ASSERT_EQ(img.width, 2);
  ASSERT_EQ(img.height, 1);
  EXPECT_EQ(img.rgb, (std::vector<uint8_t>{255, 0, 0, 0, 0, 255}));
}

TEST(Image, BadInputsGetOneClearError) {
  EXPECT_NE(error_of("").find("request.image: empty image data"), std::string::npos);
  EXPECT_NE(error_of("hello world").find("not a PNG, JPEG, GIF or WebP image (first bytes 68 65 6c"),
            std::string::npos);
  const std::string good = png(8, 8, random_rgb(8, 8, 2));
  EXPECT_NE(error_of(good.substr(0, 20)).find("corrupt or truncated PNG header"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() - 20)).find("corrupt or truncated PNG image"), std::string::npos);
  // A header declaring 100000 x 100000 over a few bytes: refused from the header, nothing decoded.
  std::string bomb = good;
  bomb[16] = 0, bomb[17] = 1, bomb[18] = char(0x86), bomb[19] = char(0xa0);  // width 100000
  bomb[20] = 0, bomb[21] = 1, bomb[22] = char(0x86), bomb[23] = char(0xa0);  // height 100000
  const std::string e = error_of(bomb);
  EXPECT_TRUE(e.find("100000 x 100000") != std::string::npos && e.find("over the limit") != std::string::npos) << e;
  ImageLimits small;
  small.max_bytes = 64;
  EXPECT_NE(error_of(good, small).find("over the limit of 64 bytes"), std::string::npos);
  ImageLimits few;  // the cap applies to what the header says, for the formats stb reads it from too
  few.max_pixels = 63;
  EXPECT_NE(error_of(good, few).find("declares 8 x 8 pixels, over the limit of 63 pixels"), std::string::npos);
  std::string huge = good;  // 0xf7f7f7f7 x 0xf7f7f7f7: the product overflows 64 bits
  for (int i = 16; i < 24; ++i) huge[size_t(i)] = char(0xf7);
  EXPECT_NE(error_of(huge).find("declares 4160223223 x 4160223223 pixels"), std::string::npos);
  std::string jpg;
  ASSERT_EQ(stbi_write_jpg_to_func(append, &jpg, 8, 8, 3, random_rgb(8, 8, 4).data(), 90), 1);
  EXPECT_NE(error_of(jpg, few).find("JPEG image of 8 x 8 = 64 pixels is over the limit of 63"), std::string::npos);
  std::string zero = good;
  zero[16] = zero[17] = zero[18] = zero[19] = 0;  // width 0
  EXPECT_NE(error_of(zero).find("request.image: corrupt or truncated PNG header"), std::string::npos);
  EXPECT_THROW(read_image_file("/nonexistent/x.png"), Error);
}

// RFC 4648's test vectors (section 10), and what is not base64.
TEST(Base64, DecodesRfc4648VectorsAndRefusesTheRest) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"Zg==", "f"},
                                                         {"Zm8=", "fo"},
                                                         {"Zm9v", "foo"},
                                                         {"Zm9vYg==", "foob"},
                                                         {"Zm9vYmE=", "fooba"},
                                                         {"Zm9vYmFy", "foobar"}};
  for (const auto& [in, want] : vectors) {
    std::string out;
    EXPECT_TRUE(base64_decode(in, out)) << in;
    EXPECT_EQ(out, want) << in;
  }
  std::string out;
  for (const char* bad : {"Zg=", "Zg=a", "Z===", "Zm9v!A==", "Zm9vYmFy\n", "=Zg="})
    EXPECT_FALSE(base64_decode(bad, out)) << bad;
}

// Images as data: URIs (the server's image_url parts): the PNG's bytes back; every other URL refused by rule.
TEST(Image, DataUrisGiveTheirBytesAndRemoteUrlsAreRefused) {
  const std::string bytes = png(4, 3, random_rgb(4, 3, 9));
  // The encoding written here from RFC 4648's definition (3 bytes -> 4 characters of 6 bits, '=' padding).
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? uint8_t(bytes[i + k]) : 0);
    for (size_t k = 0; k < 4; ++k) b64 += k <= n ? alphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  EXPECT_EQ(image_bytes_from_url("data:image/png;base64," + b64, "u"), bytes);
  EXPECT_EQ(decode_image(image_bytes_from_url("DATA:image/png;base64," + b64, "u"), "u").width, 4);
  const std::pair<std::string, const char*> bad[] = {
      {"https://example.com/cat.png", "not fetched"},         {"HTTP://10.0.0.1/x.png", "not fetched"},
      {"file:///etc/passwd", "must be a data: URI"},          {"data:image/png," + b64, "must be base64"},
      {"data:text/plain;base64," + b64, "not an image type"}, {"data:image/png;base64", "without a ','"},
      {"data:image/png;base64,Zg=a", "not valid base64"},
  };
  for (const auto& [url, want] : bad) {
    try {
      image_bytes_from_url(url, "messages[0].content[1].image_url.url");
      ADD_FAILURE() << "accepted " << url;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("messages[0].content[1]"), std::string::npos) << e.what();
    }
  }
  ImageLimits small;
  small.max_bytes = 30;  // the base64 text alone says the image is larger: refused before decoding
  EXPECT_THROW(image_bytes_from_url("data:image/png;base64," + b64, "u", small), Error);
}

// Files: a missing one and one that is not a regular file (a device could block or never end) are refused.
TEST(Image, FilesMustBeRegularFiles) {
  for (const auto& [path, want] :
       std::vector<std::pair<std::string, const char*>>{{"/nonexistent/a.png", "cannot open image file"},
                                                        {"/dev/zero", "not a regular file"},
                                                        {"/tmp", "not a regular file"}}) {
    try {
      read_image_file(path);
      ADD_FAILURE() << "read " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(Image, GridsKeepTheAspectUnderTheBudget) {
  PatchOptions o;  // p 14, 2 x 2 windows, 16384 patches
  int64_t gh = 0, gw = 0;
  patch_grid_for(448, 448, o, &gh, &gw);  // 32 x 32 patches: kept as is
  EXPECT_EQ(gh, 32);
  EXPECT_EQ(gw, 32);
  patch_grid_for(640, 480, o, &gh, &gw);  // 45.7 x 34.3 patches -> whole windows below
  EXPECT_EQ(gw, 44);
  EXPECT_EQ(gh, 34);
  patch_grid_for(10, 10, o, &gh, &gw);  // smaller than one window: one window
  EXPECT_EQ(gh, 2);
  EXPECT_EQ(gw, 2);
  o.max_patches = 1024;
  patch_grid_for(4000, 3000, o, &gh, &gw);  // scaled down to the budget, aspect 4:3 within a window
  EXPECT_LE(gh * gw, 1024);
  EXPECT_GE(gh * gw, 900);
  EXPECT_NEAR(double(gw) / double(gh), 4.0 / 3.0, 0.1);
  patch_grid_for(1000000, 1, o, &gh, &gw);  // a thin strip: the long side gives way
  EXPECT_EQ(gh, 2);
  EXPECT_LE(gh * gw, 1024);
  o.max_patches = 3;
  EXPECT_THROW(patch_grid_for(100, 100, o, &gh, &gw), Error);
}

// K3's scale-down-and-pad, by hand from navit_resize_image's formula (p 14, windows of 28 pixels).
TEST(Image, ScaleAndPadFollowsK3sProcessor) {
  PatchOptions o;
  o.fit = ImageFit::kScaleAndPad;
  // Under the budget: kept at 100 x 75, padded to 112 x 84 (never stretched: kStretch gives 4 x 6 patches).
  PatchPlan plan = plan_patches(100, 75, o);
  EXPECT_EQ(plan.content_w, 100);
  EXPECT_EQ(plan.content_h, 75);
  EXPECT_EQ(plan.grid_w, 8);
  EXPECT_EQ(plan.grid_h, 6);
  // Over the budget: 2500 x 1900 is 178 x 135 patches; scale sqrt(16384 / 24030) = 0.82572: 2064 x 1568,
  // padded to 2072 x 1568 = 148 x 112 patches.
  plan = plan_patches(2500, 1900, o);
  EXPECT_EQ(plan.content_w, 2064);
  EXPECT_EQ(plan.content_h, 1568);
  EXPECT_EQ(plan.grid_w, 148);
  EXPECT_EQ(plan.grid_h, 112);
  // Over the side limit (512 patches = 7168 pixels): 8000 x 20 scales by 0.896 to 7168 x 17, padded to 28 high.
  plan = plan_patches(8000, 20, o);
  EXPECT_EQ(plan.content_w, 7168);
  EXPECT_EQ(plan.content_h, 17);
  EXPECT_EQ(plan.grid_w, 512);
  EXPECT_EQ(plan.grid_h, 2);
  // The padding is black: a white 15 x 14 image (p 14, windows of 1 x 2 patches) fills one patch and 1 column of
  // the next; the rest of the second patch reads (0 - 0.5) / 0.5.
  o.patch_size = 14;
  o.merge_h = 1;
  o.merge_w = 2;
  const ImagePatches q = image_to_patches(Image{15, 14, std::vector<uint8_t>(15 * 14 * 3, 255)}, o);
  ASSERT_EQ(q.grid_h, 1);
  ASSERT_EQ(q.grid_w, 2);
  for (int64_t ch = 0; ch < 3; ++ch)
    for (int64_t y = 0; y < 14; ++y)
      for (int64_t x = 0; x < 14; ++x) {
        EXPECT_NEAR(q.values[size_t((ch * 14 + y) * 14 + x)], 1.0f, 1e-6);  // 255 / 127.5 - 1 in float32
        EXPECT_NEAR(q.values[size_t(588 + (ch * 14 + y) * 14 + x)], x == 0 ? 1.0f : -1.0f, 1e-6);
      }
}

TEST(Image, PatchesHoldTheNormalisedPixelsInChannelRowColumnOrder) {
  const int w = 8, h = 4;  // 2 x 4 patches of 2 x 2 pixels, no resize
  const std::vector<uint8_t> px = random_rgb(w, h, 3);
  Image img{w, h, px};
  PatchOptions o;
  o.patch_size = 2;
  o.merge_h = 1;
  o.merge_w = 2;
  const ImagePatches p = image_to_patches(img, o);
  ASSERT_EQ(p.grid_h, 2);
  ASSERT_EQ(p.grid_w, 4);
  ASSERT_EQ(p.values.size(), size_t(8 * 12));
  // Patch (1, 2), channel 2, pixel (row 1, col 0) is image pixel (3, 4).
  const float want = (float(px[size_t((3 * w + 4) * 3 + 2)]) / 255.0f - 0.5f) / 0.5f;
  EXPECT_NEAR(p.values[size_t((1 * 4 + 2) * 12 + (2 * 2 + 1) * 2 + 0)], want, 1e-6);
  // A larger image is resized to the grid's pixels: a flat colour stays flat.
  Image flat{300, 100, std::vector<uint8_t>(300 * 100 * 3, 51)};
  o.max_patches = 64;
  const ImagePatches q = image_to_patches(flat, o);
  EXPECT_EQ(q.grid_h * q.grid_w <= 64, true);
  for (float v : q.values) EXPECT_NEAR(v, (51.0f / 255.0f - 0.5f) / 0.5f, 1e-6);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("myriad_idx_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

TEST(Idx, ReadsPlainAndGzipAndRefusesBadFiles) {
  // [2, 2, 3] unsigned bytes 0..11.
  std::string idx("\0\0\x08\x03\0\0\0\x02\0\0\0\x02\0\0\0\x03", 16);
  for (int i = 0; i < 12; ++i) idx += char(i);
  const std::string gz = temp_path("a.gz"), plain = temp_path("a");
  write_gz(gz, idx);
  {
    FILE* f = std::fopen(plain.c_str(), "wb");
    std::fwrite(idx.data(), 1, idx.size(), f);
    std::fclose(f);
  }
  for (const std::string& p : {gz, plain}) {
    const IdxArray a = read_idx(p);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 2, 3}));
    ASSERT_EQ(a.values.size(), 12u);
    EXPECT_EQ(a.values[11], 11);
  }
  auto error = [&](const std::string& bytes) {
    write_gz(gz, bytes);
    try {
      read_idx(gz);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(idx.substr(0, idx.size() - 1)).find("promises 12 values, found 11"), std::string::npos);
  EXPECT_NE(error(std::string("\x01\0\x08\x01", 4)).find("not an IDX file"), std::string::npos);
  EXPECT_NE(error(std::string("\0\0\x0d\x01\0\0\0\x01"
                              "abcd",
                              12))
                .find("value type 0xd is not supported"),
            std::string::npos);
  EXPECT_NE(error(std::string("\0\0\x08\x02\xff\xff\xff\xff\xff\xff\xff\xff", 12)).find("the limit"),
            std::string::npos);
  std::remove(gz.c_str());
  std::remove(plain.c_str());
  EXPECT_THROW(read_idx("/nonexistent/idx"), Error);
}

TEST(Idx, SharedMnistTestSet) {
  const std::string dir = MYRIAD_SOURCE_DIR "/../shared/data/mnist/";
  if (!std::filesystem::exists(dir + "t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "no " << dir;
  const LabeledImages m = read_mnist(dir + "t10k-images-idx3-ubyte.gz", dir + "t10k-labels-idx1-ubyte.gz");
  ASSERT_EQ(m.images.size(), 10000u);
  EXPECT_EQ(m.images[0].width, 28);
  // The test set's first digits (as every MNIST tutorial prints them) and a count per class near 1000.
  EXPECT_EQ(std::vector<int>(m.labels.begin(), m.labels.begin() + 4), (std::vector<int>{7, 2, 1, 0}));
  std::vector<int> per(10, 0);
  for (int l : m.labels) ++per[size_t(l)];
  for (int c : per) EXPECT_TRUE(c > 850 && c < 1200) << c;
}

TEST(ShapeScenes, PixelsCaptionAndAnswersAgreeWithTheScene) {
  int asked[4] = {0, 0, 0, 0};
  for (uint64_t i = 0; i < 200; ++i) {
    const ShapeScene s = make_shape_scene(split_seed(false, i));
    ASSERT_EQ(s.image.width, 56);
    ASSERT_TRUE(!s.shapes.empty() && s.shapes.size() <= 4);
    auto pixel = [&](double x, double y) {
      const size_t at = size_t((int64_t(y) * 56 + int64_t(x)) * 3);
      return std::vector<int>{s.image.rgb[at], s.image.rgb[at + 1], s.image.rgb[at + 2]};
    };
    EXPECT_EQ(pixel(0, 0), (std::vector<int>{220, 220, 220}));  // corners stay background
    const std::vector<std::vector<int>> colour = {{220, 40, 40}, {40, 170, 60}, {40, 80, 220}, {230, 200, 40}};
    for (const PlacedShape& p : s.shapes) {
      // Each shape's centre (a triangle's a little below its apex) shows its colour; shapes never share a cell.
      EXPECT_EQ(pixel(p.cx, p.cy + 0.3 * p.radius), colour[size_t(p.colour)]) << i;
      EXPECT_NE(s.caption.find(shape_colour_names()[size_t(p.colour)] + " " + shape_kind_name(p.kind) + " " +
                               shape_cell_name(p.cell)),
                std::string::npos)
          << s.caption;
    }
    for (const ShapeQuestion& q : s.questions) {
      const std::string f = q.family;
      asked[f == "count" ? 0 : f == "colour" ? 1 : f == "shape" ? 2 : 3]++;
      if (f == "count") {  // recount from the scene
        int n = 0;
        for (const PlacedShape& p : s.shapes)
          n += q.question == "how many " + std::string(shape_kind_name(p.kind)) + "s?";
        EXPECT_EQ(q.answer, std::to_string(n)) << q.question;
      }
    }
  }
  for (int a : asked) EXPECT_GT(a, 50);  // every family is asked often
  // Deterministic, and the splits differ.
  EXPECT_EQ(make_shape_scene(7).image.rgb, make_shape_scene(7).image.rgb);
  EXPECT_NE(make_shape_scene(split_seed(false, 3)).image.rgb, make_shape_scene(split_seed(true, 3)).image.rgb);
  EXPECT_THROW(make_shape_scene(1, 8), Error);
}

}  // namespace
}  // namespace myriad
