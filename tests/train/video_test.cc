// Videos (data/video.h): an animated GIF's frames through stb_image, the frame count read from the blocks before
// decoding, the caps, even frame sampling; and a video as the vision tower takes it (infer/image_input.h
// add_video): chunks of init_pos_emb_time frames, one placeholder run. The GIFs are written here from the format
// (stb has no GIF writer): 4-colour frames, LZW codes of 3 bits with a clear code after every two pixels, so that
// every code is a literal and the table never widens the codes.
#include "data/video.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "infer/image_input.h"
#include "model/vision_tower.h"
#include "vision_fixture.h"

namespace myriad {
namespace {

const uint8_t kPalette[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};

// One GIF89a of frames w x h (palette indices 0..3, row-major), each a full-canvas image.
std::string gif(int w, int h, const std::vector<std::vector<uint8_t>>& frames) {
  std::string out = "GIF89a";
  auto u16 = [&](int v) {
    out += char(v & 255);
    out += char(v >> 8);
  };
  u16(w);
  u16(h);
  out += char(0x81);  // a global colour table of 2^(1+1) = 4 entries
  out += '\0';
  out += '\0';
  for (const auto& c : kPalette) out.append(reinterpret_cast<const char*>(c), 3);
  for (const auto& px : frames) {
    out += ',';
    u16(0);
    u16(0);
    u16(w);
    u16(h);
    out += '\0';
    out += char(2);  // LZW minimum code size: clear 4, end 5, codes of 3 bits
    std::string bytes;
    uint32_t acc = 0;
    int bits = 0;
    auto code = [&](uint32_t c) {
      acc |= c << bits;
      bits += 3;
      while (bits >= 8) {
        bytes += char(acc & 255);
        acc >>= 8;
        bits -= 8;
      }
    };
    for (size_t i = 0; i < px.size(); ++i) {
      if (i % 2 == 0) code(4);
      code(px[i]);
    }
    code(5);
    if (bits > 0) bytes += char(acc & 255);
    for (size_t at = 0; at < bytes.size(); at += 255) {
      const size_t n = std::min<size_t>(255, bytes.size() - at);
      out += char(n);
      out += bytes.substr(at, n);
    }
    out += '\0';
  }
  out += ';';
  return out;
}

std::vector<uint8_t> frame_pixels(int w, int h, int seed) {
  std::vector<uint8_t> px(size_t(w * h));
  for (int i = 0; i < w * h; ++i) px[size_t(i)] = uint8_t((i * 7 + seed * 3 + i / w) % 4);
  return px;
}

std::string error_of(const std::string& bytes, const VideoLimits& limits = {}) {
  try {
    decode_video(bytes, "request.video", limits);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    return e.what();
  }
  return "no error";
}

TEST(Video, AnimatedGifGivesEveryFrame) {
  const int w = 5, h = 3;
  std::vector<std::vector<uint8_t>> frames;
  for (int f = 0; f < 3; ++f) frames.push_back(frame_pixels(w, h, f));
  const Video v = decode_video(gif(w, h, frames), "a.gif");
  ASSERT_EQ(v.width, w);
  ASSERT_EQ(v.height, h);
  ASSERT_EQ(v.frames.size(), 3u);
  for (int f = 0; f < 3; ++f) {
    std::vector<uint8_t> want;
    for (uint8_t i : frames[size_t(f)]) want.insert(want.end(), kPalette[i], kPalette[i] + 3);
    EXPECT_EQ(v.frames[size_t(f)].rgb, want) << "frame " << f;
  }
  // The still image decoder sees the first frame; a one-frame GIF is a one-frame video.
  EXPECT_EQ(decode_image(gif(w, h, frames), "a.gif").rgb, v.frames[0].rgb);
  EXPECT_EQ(decode_video(gif(w, h, {frames[1]}), "b.gif").frames.size(), 1u);
}

TEST(Video, FramesAndPixelsAreCappedBeforeDecoding) {
  const int w = 4, h = 4;
  std::vector<std::vector<uint8_t>> frames(5, frame_pixels(w, h, 1));
  const std::string five = gif(w, h, frames);
  VideoLimits few;
  few.max_frames = 4;
  EXPECT_NE(error_of(five, few).find("request.video: GIF of 5 frames is over the limit of 4 frames"),
            std::string::npos);
  VideoLimits small;
  small.image.max_pixels = 5 * 16 - 1;  // one frame fits, five do not
  EXPECT_NE(error_of(five, small).find("5 frames of 4 x 4 = 80 pixels is over the limit of 79 pixels"),
            std::string::npos);
  EXPECT_EQ(decode_video(five, "v.gif", VideoLimits{.image = {.max_pixels = 80}}).frames.size(), 5u);
  // Cut inside the third frame: an error naming the source, or the frames before the cut; never a crash.
  const std::string cut = five.substr(0, five.size() * 5 / 10);
  try {
    const Video v = decode_video(cut, "cut.gif");
    EXPECT_LT(v.frames.size(), 5u);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("cut.gif"), std::string::npos);
  }
  EXPECT_NE(error_of(std::string("GIF89a\x04\x00\x04\x00\x00\x00\x00;", 14)).find("request.video"), std::string::npos);
  EXPECT_NE(error_of("not a video").find("not a PNG, JPEG, BMP or GIF"), std::string::npos);
}

TEST(Video, FramesAreSampledEvenly) {
  EXPECT_EQ(sample_frames(3, 4), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(sample_frames(10, 4), (std::vector<int64_t>{1, 3, 6, 8}));
  EXPECT_EQ(sample_frames(16, 16).size(), 16u);
  const std::vector<int64_t> s = sample_frames(1000, 16);
  ASSERT_EQ(s.size(), 16u);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_EQ(s[i] - s[i - 1], i % 2 ? 62 : 63);
  EXPECT_THROW(sample_frames(5, 0), Error);
}

TEST(Video, ChunksOfInitPosEmbTimeFramesTakeOnePlaceholderRun) {
  const VisionConfig v = test::small_vision_config(/*patch=*/4, 16, 32, 16, 8);  // 4 frames per chunk
  Video video;
  video.width = 16;
  video.height = 8;
  for (int f = 0; f < 6; ++f) {
    Image im;
    im.width = 16;
    im.height = 8;
    im.rgb.assign(16 * 8 * 3, uint8_t(40 * f));
    video.frames.push_back(im);
  }
  ImageInput in;
  Image still;
  still.width = still.height = 8;
  still.rgb.assign(8 * 8 * 3, 7);
  add_image(in, v, still);
  add_video(in, v, video);
  ASSERT_EQ(in.grids.size(), 3u);  // the image, then chunks of 4 and 2 frames
  EXPECT_EQ(in.grids[1].t, 4);
  EXPECT_EQ(in.grids[2].t, 2);
  EXPECT_EQ(in.grids[1].h, in.grids[2].h);
  ASSERT_EQ(in.tokens.size(), 2u);  // one run per image or video
  EXPECT_EQ(in.tokens[1], vision_tokens(v, in.grids[1]) + vision_tokens(v, in.grids[2]));
  int64_t patches = 0;
  for (const PatchGrid& g : in.grids) patches += g.patches();
  EXPECT_EQ(int64_t(in.values.size()), patches * 3 * 4 * 4);
  EXPECT_NO_THROW(check_patch_grids(v, in.grids, patches));
  // Frame 5 (the last) is the second chunk's second frame: its values come last, all (40 * 5 / 255 - 0.5) / 0.5.
  EXPECT_NEAR(in.values.back(), (200.0 / 255.0 - 0.5) / 0.5, 1e-6);
  // A long video keeps max_video_frames frames: four chunks.
  for (int f = 6; f < 40; ++f) video.frames.push_back(video.frames[0]);
  ImageInput many;
  add_video(many, v, video);
  EXPECT_EQ(many.grids.size(), 4u);
  for (const PatchGrid& g : many.grids) EXPECT_EQ(g.t, 4);
}

}  // namespace
}  // namespace myriad
