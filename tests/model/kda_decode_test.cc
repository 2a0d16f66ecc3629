// The KDA mixer with a carried state: a sequence processed token by token (recurrent form) or in pieces
// (chunkwise form) equals the training forward over the whole sequence, and the state does not grow.
#include <gtest/gtest.h>

#include <random>

#include "infer/kda_decoder.h"
#include "model/sequence_context.h"
#include "model/transformer.h"

namespace myriad {
namespace {

TEST(KdaDecode, PiecesAndTokensEqualTheWholeSequence) {
  const ModelConfig c = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
  Transformer model(c, ModelWeights::random(c, 21));
  const int64_t layer = 0, T = 300;
  ASSERT_EQ(c.mixer(layer), Mixer::kKda);
  std::mt19937 rng(22);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  Tensor x = Tensor::empty({T, c.hidden_size});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = n01(rng);
  Tensor whole;
  {
    ag::NoGradGuard ng;
    LocalSequenceContext ctx;
    whole = model.kda_mixer(layer, ag::Var(x, false), ForwardOptions{}, ctx).value();
  }
  double scale = 0;
  for (float v : whole.to_vector()) scale = std::max(scale, double(std::abs(v)));
  KdaDecoder dec(c, model.weights(), layer);
  for (int64_t piece : {int64_t(1), int64_t(7), int64_t(100)}) {
    KdaState st = dec.make_state();
    const size_t state_bytes = st.bytes();
    double worst = 0;
    for (int64_t t0 = 0; t0 < T; t0 += piece) {
      const int64_t t1 = std::min(T, t0 + piece);
      const Tensor y = dec.forward(x.slice(0, t0, t1).contiguous(), st, 16);
      const auto a = y.to_vector(), b = whole.slice(0, t0, t1).contiguous().to_vector();
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
    }
    EXPECT_EQ(st.tokens, T);
    EXPECT_EQ(st.bytes(), state_bytes) << "the KDA state must not grow with the sequence";
    // f32, the same maths in another association (recurrent vs chunkwise, split convs): 1e-5 of the scale.
    EXPECT_LE(worst, 1e-5 * scale + 1e-6) << "pieces of " << piece;
  }
}

}  // namespace
}  // namespace myriad
