// The vision tower's pieces the parity script (tests/model/vision_parity.py) does not single out: the parameter
// count against the published figure, the 2-D rotary tables by hand, the merged-token count, and the grid
// errors. The tower's outputs and gradients are checked against PyTorch there.
#include "model/vision_tower.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "autograd/functions.h"
#include "core/error.h"
#include "infer/inference_model.h"
#include "model/accounting.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "vision_fixture.h"

namespace myriad {
namespace {

const std::string kSharedK3 = MYRIAD_SOURCE_DIR "/../shared/data/kimi-k3-config.json";

VisionConfig tiny_vision() {
  return test::small_vision_config(/*patch=*/2, /*width=*/16, /*mlp=*/24, /*text_hidden=*/64, /*pos_grid=*/4);
}

TEST(VisionTower, K3TowerHasThePublishedSize) {
  if (!std::filesystem::exists(kSharedK3)) GTEST_SKIP() << "missing " << kSharedK3;
  const ModelAccounting a = account_model(load_model_config(kSharedK3, nullptr));
  const int64_t tower = a.components[size_t(Component::kVision)].params;
  const int64_t projector = a.components[size_t(Component::kProjector)].params;
  // K3's vision encoder is MoonViT-400M ("about 0.4B"): within 3% of 400M.
  EXPECT_NEAR(double(tower), 400e6, 12e6);
  // The projector (patchmergerv2): 4096 -> 4096 -> 7168 without biases, then an RMSNorm over 7168.
  EXPECT_EQ(projector, 4096 * 4096 + 7168 * 4096 + 7168);
  // Neither counts as activated per text token.
  EXPECT_EQ(a.components[size_t(Component::kVision)].active, 0);
  EXPECT_EQ(a.components[size_t(Component::kProjector)].active, 0);
}

TEST(VisionTower, RotaryTablesTurnEvenPairsByColumnAndOddPairsByRow) {
  Tensor cos, sin;
  const int64_t hd = 8;  // two frequencies: 1 and 10000^(-1/2)
  vision_rope_tables(hd, {{2, 3}, {2, 2}}, &cos, &sin);
  ASSERT_EQ(cos.shape(), (Shape{10, 4}));
  const float* c = cos.data<float>();
  const float* s = sin.data<float>();
  const double f1 = 1.0 / 100.0;
  // Patch 5 of the first image: row 1, column 2. Patch 9 (second image's last): row 1, column 1.
  EXPECT_FLOAT_EQ(c[5 * 4 + 0], float(std::cos(2.0)));
  EXPECT_FLOAT_EQ(s[5 * 4 + 1], float(std::sin(1.0)));
  EXPECT_FLOAT_EQ(c[5 * 4 + 2], float(std::cos(2.0 * f1)));
  EXPECT_FLOAT_EQ(s[5 * 4 + 3], float(std::sin(1.0 * f1)));
  EXPECT_FLOAT_EQ(c[9 * 4 + 0], float(std::cos(1.0)));
  EXPECT_FLOAT_EQ(c[6 * 4 + 0], 1.0f);  // the second image restarts at row 0, column 0
  EXPECT_FLOAT_EQ(s[6 * 4 + 1], 0.0f);
  EXPECT_THROW(vision_rope_tables(6, {{2, 2}}, &cos, &sin), Error);
}

TEST(VisionTower, MergedTokensAndGridErrors) {
  const VisionConfig v = tiny_vision();
  EXPECT_EQ(vision_tokens(v, {6, 4}), 6);
  EXPECT_NO_THROW(check_patch_grids(v, {{6, 4}, {2, 2}}, 28));
  auto message = [&](const std::vector<PatchGrid>& g, int64_t rows) {
    try {
      check_patch_grids(v, g, rows);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kShape);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{6, 4}, {3, 2}}, 30).find("image 1 has a grid of 3 x 2 patches"), std::string::npos);
  EXPECT_NE(message({{6, 4}}, 25).find("the grids hold 24 patches but 25 patch rows"), std::string::npos);
  EXPECT_NE(message({}, 0).find("no images"), std::string::npos);
  // Video chunks: 1 to init_pos_emb_time frames, the tokens of one frame (sd2_tpool averages over the frames).
  const int64_t frames = v.init_pos_emb_time.value_or(4);
  EXPECT_EQ(vision_tokens(v, {6, 4, frames}), 6);
  EXPECT_NO_THROW(check_patch_grids(v, {{6, 4, frames}, {2, 2}}, 24 * frames + 4));
  EXPECT_NE(message({{2, 2, frames + 1}}, 4 * (frames + 1)).find("a video chunk holds 1 to init_pos_emb_time"),
            std::string::npos);
  EXPECT_NE(message({{2, 2, 0}}, 0).find("has 0 frames"), std::string::npos);
}

TEST(VisionTower, FramesOfAChunkShareTheirImagesRotaryAngles) {
  Tensor cos, sin, cos1, sin1;
  vision_rope_tables(8, {{2, 3, 3}, {2, 2}}, &cos, &sin);
  vision_rope_tables(8, {{2, 3}, {2, 2}}, &cos1, &sin1);
  ASSERT_EQ(cos.shape(), (Shape{22, 4}));
  for (int64_t f = 0; f < 3; ++f)
    for (int64_t i = 0; i < 6 * 4; ++i) {
      EXPECT_EQ(cos.data<float>()[f * 24 + i], cos1.data<float>()[i]);
      EXPECT_EQ(sin.data<float>()[f * 24 + i], sin1.data<float>()[i]);
    }
  for (int64_t i = 0; i < 4 * 4; ++i) EXPECT_EQ(cos.data<float>()[72 + i], cos1.data<float>()[24 + i]);
}

TEST(VisionTower, PatchesOfTheWrongWidthAreRefused) {
  ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  c.vision_config = tiny_vision();
  const ModelWeights w = ModelWeights::random(c, 1);
  const ag::Var ok(Tensor::zeros({16, 12}));
  EXPECT_EQ(encode_images(*c.vision_config, w, ok, {{4, 4}}).shape(), (Shape{4, 64}));
  const ag::Var bad(Tensor::zeros({16, 11}));
  try {
    encode_images(*c.vision_config, w, bad, {{4, 4}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("patch rows have 11 values; patch_size 2 needs 3 x 2 x 2 = 12"),
              std::string::npos)
        << e.what();
  }
}

TEST(VisionTower, PlaceholderCountsMustMatchTheImageTokens) {
  ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  c.vision_config = tiny_vision();
  const int64_t ph = *c.media_placeholder_token_id;
  Transformer model(c, ModelWeights::random(c, 2));
  const Tensor tokens = Tensor::from_vector(std::vector<int64_t>{5, ph, ph, 9, ph, 12}, {6});
  const ag::Var three(Tensor::zeros({3, c.hidden_size}));
  ForwardOptions opt;
  opt.image_features = &three;
  ag::NoGradGuard no_grad;
  EXPECT_EQ(model.forward(tokens, Tensor(), opt).hidden.shape(), (Shape{6, c.hidden_size}));
  const ag::Var four(Tensor::zeros({4, c.hidden_size}));
  opt.image_features = &four;
  try {
    model.forward(tokens, Tensor(), opt);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape);
    EXPECT_NE(std::string(e.what()).find("the text has 3 image placeholder tokens (id " + std::to_string(ph) +
                                         ") but the images give 4 tokens"),
              std::string::npos)
        << e.what();
  }
  c.media_placeholder_token_id.reset();
  Transformer no_placeholder(c, ModelWeights::random(c, 2));
  opt.image_features = &three;
  EXPECT_THROW(no_placeholder.forward(tokens, Tensor(), opt), Error);
}

// One model: the image tokens placed by the training forward, by a prefill in two chunks that split an image's
// placeholder run, and by decoding token by token give the same logits.
TEST(VisionTower, ImagesGiveTheSameLogitsInTrainingPrefillAndDecode) {
  ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  c.vision_config = tiny_vision();
  const int32_t ph = int32_t(*c.media_placeholder_token_id);
  auto w = std::make_shared<ModelWeights>(ModelWeights::random(c, 5));
  const Transformer model(c, *w);
  const std::vector<PatchGrid> grids = {{4, 4}, {2, 4}};  // 4 + 2 image tokens
  std::mt19937 rng(6);
  std::normal_distribution<float> gauss;
  Tensor px = Tensor::empty({24, 12});
  for (int64_t i = 0; i < px.numel(); ++i) px.data<float>()[i] = gauss(rng);
  ag::NoGradGuard no_grad;
  const ag::Var feats = encode_images(*c.vision_config, *w, ag::Var(px), grids);
  const std::vector<int64_t> ids = {5, 17, ph, ph, ph, ph, 9, 44, ph, ph, 2, 12};
  const int64_t T = int64_t(ids.size()), D = c.hidden_size;
  ForwardOptions opt;
  opt.image_features = &feats;
  const Tensor logits = model.logits(model.forward(Tensor::from_vector(ids, {T}), Tensor(), opt).hidden);
  const Tensor text_only = model.logits(model.forward(Tensor::from_vector(ids, {T}), Tensor()).hidden);

  InferenceModel inf(c, DecodeWeights::from_model(model.weights()));
  inf.set_vision_weights(w);
  const Tensor rows = inf.encode_images(px, grids);
  const float* r = rows.data<float>();
  double feat_diff = 0;
  for (int64_t i = 0; i < rows.numel(); ++i)
    feat_diff = std::max(feat_diff, double(std::abs(r[i] - feats.value().data<float>()[i])));
  EXPECT_EQ(feat_diff, 0.0);  // the same function on the same weights
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  auto diff = [](const Tensor& a, const Tensor& b) {
    double m = 0;
    for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
    return m;
  };
  // Prefill in two chunks: tokens 0..3 (two of the first image's four placeholders) and 4..11.
  SequenceState seq = inf.new_sequence();
  const BatchEntry first{&seq, std::span<const int32_t>(ids32.data(), 4), nullptr, std::span<const float>(r, 2 * D)};
  const Tensor a = inf.forward(std::span<const BatchEntry>(&first, 1), true);
  const BatchEntry second{&seq, std::span<const int32_t>(ids32.data() + 4, 8), nullptr,
                          std::span<const float>(r + 2 * D, 4 * D)};
  const Tensor b = inf.forward(std::span<const BatchEntry>(&second, 1), true);
  // f32 on both sides through 4 layers: ~1e-6 of O(1) logits (as the text-only prefill test).
  EXPECT_LE(diff(a, logits.slice(0, 0, 4)), 1e-4);
  EXPECT_LE(diff(b, logits.slice(0, 4, T)), 1e-4);
  EXPECT_GT(diff(logits, text_only), 1e-3);  // the images change the logits
  SequenceState dec = inf.new_sequence();
  int64_t k = 0;
  for (int64_t t = 0; t < T; ++t) {
    const bool image = ids32[size_t(t)] == ph;
    const BatchEntry one{&dec, std::span<const int32_t>(ids32.data() + t, 1), nullptr,
                         image ? std::span<const float>(r + (k++) * D, D) : std::span<const float>()};
    EXPECT_LE(diff(inf.forward(std::span<const BatchEntry>(&one, 1)), logits.slice(0, t, t + 1)), 1e-4) << t;
  }
  // Rows that do not match the placeholders are refused.
  SequenceState bad = inf.new_sequence();
  const BatchEntry wrong{&bad, std::span<const int32_t>(ids32.data(), 4), nullptr, std::span<const float>(r, 3 * D)};
  EXPECT_THROW(inf.forward(std::span<const BatchEntry>(&wrong, 1)), Error);
}

}  // namespace
}  // namespace myriad
