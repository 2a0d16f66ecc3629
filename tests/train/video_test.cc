// Videos (data/media/video.h): an animated GIF's frames through giflib, the frame count read from the blocks before
// decoding, the caps, even frame sampling; and a video as the vision tower takes it (infer/image_input.h
// add_video): chunks of init_pos_emb_time frames, one placeholder run. The GIFs are written here from the format
// (stb has no GIF writer): 4-colour frames, LZW codes of 3 bits with a clear code after every two pixels, so that
// every code is a literal and the table never widens the codes.
#include "data/media/video.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "core/error.h"
#include "data/datasets/image_store.h"
#include "data/datasets/image_text_records.h"
#include "data/datasets/motion_clips.h"
#include "infer/image_input.h"
#include "model/transformer.h"
#include "model/vision_tower.h"
#include "model/weights.h"
#include "train/image_text_source.h"
#include "train/train_config.h"
#include "train/trainer.h"
#include "train/vision_training.h"
#include "vision_fixture.h"

namespace myriad {
namespace {

const uint8_t kPalette[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};

// A frame of a GIF: its rectangle on the screen, palette indices 0..3 (row-major), and its graphics control
// block (transparent index, disposal), written when either is set.
struct GifFrame {
  int left = 0, top = 0, width = 0, height = 0;
  std::vector<uint8_t> pixels;
  int transparent = -1, disposal = 0;
};

std::string gif_frames(int w, int h, const std::vector<GifFrame>& frames) {
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
  for (const GifFrame& f : frames) {
    if (f.transparent >= 0 || f.disposal != 0) {  // graphics control extension: 4 bytes, then the terminator
      out += "\x21\xf9\x04";
      out += char((f.disposal << 2) | (f.transparent >= 0 ? 1 : 0));
      u16(0);  // delay
      out += char(f.transparent >= 0 ? f.transparent : 0);
      out += '\0';
    }
    const std::vector<uint8_t>& px = f.pixels;
    out += ',';
    u16(f.left);
    u16(f.top);
    u16(f.width);
    u16(f.height);
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

// Full-screen frames.
std::string gif(int w, int h, const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<GifFrame> f;
  for (const auto& px : frames) f.push_back({0, 0, w, h, px, -1, 0});
  return gif_frames(w, h, f);
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

// GIF89a's compositing, as a viewer shows the frames: a frame draws its rectangle over the canvas, its transparent
// index leaving what is below; then its disposal: 1 keep, 2 clear the rectangle (to black here: no alpha), 3 put
// back the canvas from before the frame. The expected screens are written out by hand from those rules.
TEST(Video, FramesAreCompositedAsAViewerShowsThem) {
  const std::vector<GifFrame> frames = {
      {0, 0, 4, 2, {0, 0, 0, 0, 0, 0, 0, 0}, -1, 1},  // all red, kept
      {1, 0, 2, 1, {1, 3}, 3, 2},                     // green, then a transparent pixel; cleared after
      {0, 1, 1, 1, {2}, -1, 3},                       // blue at (0, 1); the canvas before it put back after
      {3, 1, 1, 1, {1}, -1, 0},                       // green at (3, 1)
  };
  const Video v = decode_video(gif_frames(4, 2, frames), "c.gif");
  ASSERT_EQ(v.frames.size(), 4u);
  const uint8_t R[3] = {255, 0, 0}, G[3] = {0, 255, 0}, B[3] = {0, 0, 255}, K[3] = {0, 0, 0};
  auto screen = [](std::vector<const uint8_t*> px) {
    std::vector<uint8_t> out;
    for (const uint8_t* p : px) out.insert(out.end(), p, p + 3);
    return out;
  };
  EXPECT_EQ(v.frames[0].rgb, screen({R, R, R, R, R, R, R, R}));
  EXPECT_EQ(v.frames[1].rgb, screen({R, G, R, R, R, R, R, R}));
  EXPECT_EQ(v.frames[2].rgb, screen({R, K, K, R, B, R, R, R}));
  EXPECT_EQ(v.frames[3].rgb, screen({R, K, K, R, R, R, R, G}));
  // Without the trailer (a common truncation) the whole frames are kept; cut inside a frame, refused.
  std::string no_trailer = gif_frames(4, 2, frames);
  no_trailer.pop_back();
  EXPECT_EQ(decode_video(no_trailer, "t.gif").frames.size(), 4u);
  EXPECT_NE(error_of(no_trailer.substr(0, no_trailer.size() - 3)).find("corrupt or truncated GIF"), std::string::npos);
  // A frame reaching outside the screen is refused by name.
  EXPECT_NE(error_of(gif_frames(4, 2, {{3, 0, 2, 1, {0, 1}, -1, 0}})).find("lies outside the 4 x 2 screen"),
            std::string::npos);
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
  EXPECT_NE(error_of("not a video").find("not a PNG, JPEG, GIF or WebP"), std::string::npos);
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

TEST(Video, MotionClipsMoveTheSquareOneWay) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const MotionClip c = make_motion_clip(seed, 32, 4);
    ASSERT_EQ(c.video.frames.size(), 4u);
    // The square's left and top edges per frame, from the pixels.
    std::vector<int64_t> xs, ys;
    for (const Image& f : c.video.frames) {
      int64_t x0 = 99, y0 = 99;
      for (int64_t y = 0; y < 32; ++y)
        for (int64_t x = 0; x < 32; ++x)
          if (f.rgb[size_t((y * 32 + x) * 3)] != 200 || f.rgb[size_t((y * 32 + x) * 3 + 1)] != 200) {
            x0 = std::min(x0, x);
            y0 = std::min(y0, y);
          }
      xs.push_back(x0);
      ys.push_back(y0);
    }
    const bool horizontal = c.direction == "left" || c.direction == "right";
    const auto& along = horizontal ? xs : ys;
    const auto& across = horizontal ? ys : xs;
    for (size_t f = 1; f < 4; ++f) {
      EXPECT_EQ(across[f], across[0]) << seed;
      const bool forward = c.direction == "right" || c.direction == "down";
      EXPECT_TRUE(forward ? along[f] > along[f - 1] : along[f] < along[f - 1]) << seed << " " << c.direction;
    }
    EXPECT_EQ(c.questions[0].answer, c.direction);
  }
  EXPECT_THROW(make_motion_clip(1, 8, 4), Error);
}

// Training on video chunks reaches every part of the tower: 30 steps on motion clips (4 frames, one chunk each)
// lower the held-out answer loss and move the blocks and the position table (their gradients flow through the
// frames' attention, the temporal embedding and sd2_tpool's mean). How well a model learns the direction is a
// benchmark (make demo-video, README), not a test.
TEST(Video, TrainingOnClipsLowersTheLossAndReachesTheTower) {
  ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  c.vision_config = test::small_vision_config(/*patch=*/7, /*width=*/32, /*mlp=*/64, c.hidden_size, /*pos_grid=*/4);
  std::vector<std::string> texts;
  for (uint64_t i = 0; i < 64; ++i)
    for (const ShapeQuestion& q : make_motion_clip(i, 28).questions) texts.push_back(q.question + " " + q.answer);
  const Tokenizer tok = Tokenizer::train_from_texts(texts, 300);
  c.vocab_size = tok.vocab_size();
  Transformer model(c, ModelWeights::random(c, 5));
  const Tensor block_before = model.p("vision_tower.encoder.blocks.0.wqkv.weight").value().clone();
  const Tensor pos_before = model.p("vision_tower.patch_embed.pos_emb.weight").value().clone();
  MotionClipSource src(c, tok, /*size=*/28, /*frames=*/4);
  const TrainBatch first = src.next(128);
  ASSERT_FALSE(first.grids.empty());
  for (const PatchGrid& g : first.grids) EXPECT_EQ(g.t, 4);
  src.restore({{"next_clip", uint64_t(0)}});
  const TrainConfig tc = parse_train_config({{"stages", {{{"seq_len", 128}, {"steps", 30}}}},
                                             {"batch_tokens", 512},
                                             {"lr", 0.003},
                                             {"warmup_steps", 5},
                                             {"eval_every", 1000},
                                             {"eval_batches", 2},
                                             {"checkpoint_every", 1000},
                                             {"log_every", 1000},
                                             {"kda_chunk", 32}},
                                            "test", c);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("myriad_video_" + std::to_string(getpid()))).string();
  TrainerOptions to;
  to.run_dir = dir;
  to.model_config_json = "{}";
  to.quiet = true;
  auto val_loss = [&] { return test::held_out_loss(model, c, src, 128, 2); };
  const double before = val_loss();
  Trainer(model, tc, src, to).run();
  const double after = val_loss();
  EXPECT_LT(after, 0.5 * before) << before << " -> " << after;
  auto moved = [](const Tensor& a, const Tensor& b) {
    double m = 0;
    for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
    return m;
  };
  EXPECT_GT(moved(block_before, model.p("vision_tower.encoder.blocks.0.wqkv.weight").value()), 1e-4);
  EXPECT_GT(moved(pos_before, model.p("vision_tower.patch_embed.pos_emb.weight").value()), 1e-5);
  std::filesystem::remove_all(dir);
}

// Records with videos: a GIF (path) and a list of frames become chunks of frames in their marker's place; frames of
// different sizes, video_url parts in chat records and data prepare get one clear error each.
TEST(Video, RecordsCarryVideosAsGifsOrFrameLists) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("myriad_video_records_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  std::vector<std::vector<uint8_t>> frames;
  for (int f = 0; f < 6; ++f) frames.push_back(frame_pixels(28, 28, f));
  std::ofstream(dir + "/clip.gif", std::ios::binary) << gif(28, 28, frames);
  const MotionClip clip = make_motion_clip(3, 28, 3);
  nlohmann::json list = nlohmann::json::array();
  for (const Image& f : clip.video.frames) list.push_back(png_data_uri(f));
  Image small;
  small.width = small.height = 14;
  small.rgb.assign(14 * 14 * 3, 9);
  std::ofstream(dir + "/records.jsonl")
      << nlohmann::json{{"videos", {"clip.gif"}}, {"prompt", "what is it? <|image|>"}, {"answer", "noise"}}.dump()
      << "\n"
      << nlohmann::json{{"images", {png_data_uri(small)}}, {"videos", {list}}, {"text", "<|image|> then <|image|>"}}
             .dump()
      << "\n";
  const std::vector<ImageTextRecord> records = read_image_text_records(dir + "/records.jsonl");
  ASSERT_EQ(records.size(), 2u);
  ASSERT_EQ(records[0].videos.size(), 1u);
  EXPECT_EQ(records[1].videos[0].size(), 3u);
  ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  c.vision_config = test::small_vision_config(/*patch=*/7, /*width=*/32, /*mlp=*/64, c.hidden_size, /*pos_grid=*/4);
  std::vector<std::string> texts = {"what is it? noise", "then"};
  const Tokenizer tok = Tokenizer::train_from_texts(texts, 280);
  c.vocab_size = tok.vocab_size();
  const ImageTextExample gif_example = record_example(records[0], c, tok);
  ASSERT_EQ(gif_example.images.grids.size(), 2u);  // 6 frames: chunks of 4 and 2
  EXPECT_EQ(gif_example.images.grids[0].t, 4);
  EXPECT_EQ(gif_example.images.grids[1].t, 2);
  const int32_t ph = int32_t(*c.media_placeholder_token_id);
  EXPECT_EQ(std::count(gif_example.tokens.begin(), gif_example.tokens.end(), ph), gif_example.images.tokens[0]);
  EXPECT_EQ(gif_example.images.tokens[0], 8);  // 28 x 28 at patch 7: 4 x 4 patches, 2 x 2 tokens per chunk
  const ImageTextExample mixed = record_example(records[1], c, tok);
  ASSERT_EQ(mixed.images.tokens.size(), 2u);  // the image's marker first, then the video's
  EXPECT_EQ(mixed.images.grids.back().t, 3);
  EXPECT_EQ(mixed.tokens[0], ph);

  auto format_error = [&](const std::string& line) {
    std::ofstream(dir + "/bad.jsonl") << line << "\n";
    try {
      for (const ImageTextRecord& r : read_image_text_records(dir + "/bad.jsonl")) record_example(r, c, tok);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  nlohmann::json uneven = list;
  uneven.push_back(png_data_uri(small));
  EXPECT_NE(format_error(nlohmann::json{{"videos", {uneven}}, {"text", "x"}}.dump()).find("frame 3 is 14 x 14"),
            std::string::npos);
  EXPECT_NE(format_error(nlohmann::json{{"videos", {nlohmann::json::array()}}, {"text", "x"}}.dump())
                .find("videos[0]: must be a GIF"),
            std::string::npos);
  EXPECT_NE(
      format_error(
          R"({"messages": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "clip.gif"}}]}, {"role": "assistant", "content": "x"}]})")
          .find("video_url parts are not read from chat records"),
      std::string::npos);
  EXPECT_NE(format_error(nlohmann::json{{"videos", {"clip.gif"}}, {"text", "<|image|> <|image|>"}}.dump())
                .find("2 image markers (<|image|>) but 0 images and 1 video"),
            std::string::npos);
  try {
    prepare_image_text(dir + "/records.jsonl", dir + "/prepared", false);
    ADD_FAILURE() << "data prepare took a record with videos";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data prepare stores images only"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace myriad
