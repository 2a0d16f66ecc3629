// MLA decoding with a latent cache (infer/mla_decoder.h, infer/mla_cache.h) against the naive training form
// (Transformer::mla_mixer, per-head K and V materialised) on the MLA layer of configs/tiny.json (layer 3),
// random weights, T = 520 tokens (past 512, and 8+ cache pages of 64):
//   - token-by-token decoding, and chunked prefill (chunks of 100, the last 50) followed by decoding;
//   - the NoPE (tiny's own), RoPE, RoPE+YaRN, plain-q_proj and log-n query scaling variants;
//   - gate off = plain MLA; with the gate the output is (attn * sigmoid(W_g x)) W_o^T, checked by hand;
//   - the cache holds normed c_kv and (rotated) k_pe, and its bytes are T x (C + Dr) x 4 rounded up to pages.
// Tolerance: f32 on both sides, different association (absorbed vs materialised K/V, page-wise sgemm vs tiled
// attention, online softmax over pages): max |absorbed - naive| <= 2e-5 x max |naive| over the whole [T, D] output
// (measured 2e-7 .. 1.4e-6). The weights are scaled up so that the attention is peaked (see sharp_weights).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "autograd/tape.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/threads.h"
#include "infer/mla_decoder.h"
#include "model/sequence_context.h"
#include "model/sparse_mla.h"
#include "model/transformer.h"
#include "ops/kernels.h"

namespace myriad {
namespace {

using json = nlohmann::json;

constexpr int64_t kLayer = 3;  // tiny: full_attn_layers [4] (1-based)
constexpr int64_t kT = 520;
constexpr uint64_t kSeed = 1234;
constexpr double kTol = 2e-5;  // relative to max |naive output|

json tiny_json() {
  std::ifstream in(MYRIAD_SOURCE_DIR "/configs/tiny.json");
  EXPECT_TRUE(in.good());
  return json::parse(in);
}

ModelConfig tiny() {
  return load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
}

ModelConfig variant(const std::string& name) {
  json j = tiny_json();
  if (name == "nope") {
    // tiny as it is: mla_use_nope true, gate on
  } else if (name == "rope") {
    j["mla_use_nope"] = false;
  } else if (name == "rope_yarn") {
    // original context 64 << T: most of the sequence is in YaRN's interpolated range. mscale != mscale_all_dim,
    // so both the cos/sin scaling and the softmax factor mscale(factor, mscale_all_dim)^2 are exercised.
    j["mla_use_nope"] = false;
    j["rope_scaling"] = {{"type", "yarn"},         {"factor", 8.0},    {"original_max_position_embeddings", 64},
                         {"beta_fast", 32.0},      {"beta_slow", 1.0}, {"mscale", 1.0},
                         {"mscale_all_dim", 0.707}};
  } else if (name == "no_q_lora") {
    j["q_lora_rank"] = nullptr;
  } else if (name == "gate_off") {
    j["mla_use_output_gate"] = false;
  } else if (name == "eight_heads" || name == "eight_heads_rope") {
    // 8 heads: the decode's per-page products run as two blocks of four heads (tiny's 4 heads fill one)
    j["num_attention_heads"] = 8;
    j["num_key_value_heads"] = 8;
    if (name == "eight_heads_rope") j["mla_use_nope"] = false;
  } else if (name == "sparse" || name == "sparse_rope" || name == "sparse_every_block") {
    // Blocks of 16 over 520 tokens (32 blocks, up to 30 candidates), 2 local blocks, top 3 chosen; with top_k 1000
    // every earlier block is read: the same keys as dense attention.
    j["mla_sparse_attention"] = {
        {"block_size", 16}, {"top_k", name == "sparse_every_block" ? 1000 : 3}, {"window", 32}};
    if (name == "sparse_rope") j["mla_use_nope"] = false;
  } else if (name == "logn" || name == "sparse_logn") {
    // Log-n query scaling from position 127 on: most of the 520 tokens are beyond the base (factor up to 1.29).
    j["mla_logn_base"] = 128;
    if (name == "sparse_logn") j["mla_sparse_attention"] = {{"block_size", 16}, {"top_k", 3}, {"window", 32}};
  } else {
    ADD_FAILURE() << "unknown variant " << name;
  }
  return parse_model_config(j, "tiny/" + name, nullptr);
}

// Init std 0.02 leaves the scores ~1e-2: the attention would be nearly uniform and blind to positions. Scaled up
// (q_b_proj / q_proj x10, kv_b_proj x10, the k_pe rows of kv_a_proj_with_mqa x30) the scores are O(1..10), so the
// softmax is peaked and RoPE / YaRN change the output by tens of percent (checked below).
ModelWeights sharp_weights(const ModelConfig& c, uint64_t seed) {
  ModelWeights w = ModelWeights::random(c, seed);
  const std::string a = "model.layers." + std::to_string(kLayer) + ".self_attn.";
  auto scale_rows = [&](const std::string& name, int64_t r0, int64_t r1, float f) {
    const Tensor& t = w.at(a + name + ".weight").value();
    const int64_t n = t.shape()[1];
    float* d = t.data<float>();
    for (int64_t i = r0 * n; i < r1 * n; ++i) d[i] *= f;
  };
  const int64_t H = c.num_attention_heads, Dq = c.qk_nope_head_dim + c.qk_rope_head_dim;
  scale_rows(c.q_lora_rank ? "q_b_proj" : "q_proj", 0, H * Dq, 10.0f);
  scale_rows("kv_b_proj", 0, H * (c.qk_nope_head_dim + c.v_head_dim), 10.0f);
  scale_rows("kv_a_proj_with_mqa", c.kv_lora_rank, c.kv_lora_rank + c.qk_rope_head_dim, 30.0f);
  return w;
}

Tensor random_input(int64_t T, int64_t D, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(T * D));
  for (float& e : v) e = n(rng);
  return Tensor::from_vector(v, {T, D});
}

Tensor naive(const ModelConfig& c, const ModelWeights& w, const Tensor& x) {
  Transformer tr(c, w);
  ag::NoGradGuard no_grad;
  LocalSequenceContext ctx;
  return tr.mla_mixer(kLayer, ag::Var(x), ctx).value().contiguous();
}

// max |a - b| / max |ref|
double rel_err(const Tensor& a, const Tensor& b, const Tensor& ref) {
  const std::vector<float> va = a.to_vector(), vb = b.to_vector(), vr = ref.to_vector();
  EXPECT_EQ(va.size(), vb.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) diff = std::max(diff, std::fabs(double(va[i]) - vb[i]));
  for (float r : vr) scale = std::max(scale, std::fabs(double(r)));
  return diff / std::max(scale, 1e-30);
}

void set_row(Tensor& dst, int64_t t, const Tensor& row) {
  dst.select(0, t).copy_from(row);
}

// Token by token from an empty cache.
Tensor decode_all(const MlaDecoder& dec, const Tensor& x, MlaCache& cache) {
  const int64_t T = x.shape()[0];
  Tensor out = Tensor::empty({T, x.shape()[1]});
  for (int64_t t = 0; t < T; ++t) set_row(out, t, dec.step(x.select(0, t), cache.size(), cache));
  return out;
}

// Prefill [0, prefill_len) in chunks of `chunk`, then decode the rest.
Tensor prefill_then_decode(const MlaDecoder& dec, const Tensor& x, MlaCache& cache, int64_t prefill_len,
                           int64_t chunk) {
  const int64_t T = x.shape()[0];
  Tensor out = Tensor::empty({T, x.shape()[1]});
  for (int64_t t0 = 0; t0 < prefill_len; t0 += chunk) {
    const int64_t t1 = std::min(prefill_len, t0 + chunk);
    Tensor y = dec.prefill(x.slice(0, t0, t1), cache.size(), cache);
    out.slice(0, t0, t1).copy_from(y);
  }
  for (int64_t t = prefill_len; t < T; ++t) set_row(out, t, dec.step(x.select(0, t), cache.size(), cache));
  return out;
}

class MlaVariant : public testing::TestWithParam<std::string> {};

TEST_P(MlaVariant, DecodeAndChunkedPrefillEqualNaive) {
  const ModelConfig c = variant(GetParam());
  ASSERT_EQ(c.mixer(kLayer), Mixer::kMla);
  const ModelWeights w = sharp_weights(c, kSeed);
  const Tensor x = random_input(kT, c.hidden_size, 7);
  const Tensor ref = naive(c, w, x);
  if (GetParam() == "rope" || GetParam() == "rope_yarn") {
    // Same tensors by name: the variant changes the output substantially (so positions are really tested).
    const Tensor nope = naive(variant("nope"), sharp_weights(variant("nope"), kSeed), x);
    const double d = rel_err(ref, nope, nope);
    EXPECT_GT(d, 0.1) << GetParam() << " vs nope";
    std::printf("[ %s ] differs from nope by %.3f (relative)\n", GetParam().c_str(), d);
  }
  if (c.mla_logn_base) {
    // Independent of the executions' scale_queries: row t equals row t of the model without log-n scaling whose
    // query projection is scaled by ln(t + 1) / ln(base) (the same q, so the same scores), and rows before the base
    // equal the unscaled model's. Same f32 path on both sides, different rounding of q: kTol.
    ModelConfig plain = c;
    plain.mla_logn_base.reset();
    const Tensor unscaled = naive(plain, w, x);
    for (int64_t t : {int64_t(0), int64_t(126), int64_t(127), int64_t(300), kT - 1}) {
      const double f = t + 1 <= *c.mla_logn_base ? 1.0 : std::log(double(t + 1)) / std::log(double(*c.mla_logn_base));
      ModelWeights wf = sharp_weights(plain, kSeed);
      const Tensor& qb = wf.at("model.layers." + std::to_string(kLayer) + ".self_attn.q_b_proj.weight").value();
      for (int64_t i = 0; i < qb.numel(); ++i) qb.data<float>()[i] *= float(f);
      const Tensor row = naive(plain, wf, x).select(0, t).contiguous();
      EXPECT_LE(rel_err(ref.select(0, t).contiguous(), row, ref), kTol)
          << GetParam() << ": row " << t << " factor " << f;
    }
    const double d = rel_err(ref.slice(0, 200, kT), unscaled.slice(0, 200, kT), unscaled);
    EXPECT_GT(d, 0.05) << "log-n scaling must change the rows beyond the base";
    std::printf("[ %s ] differs from unscaled beyond position 200 by %.3f (relative)\n", GetParam().c_str(), d);
  }
  if (c.mla_sparse_attention) {
    // The same weights dense: reading every block is dense attention; reading 3 of up to 30 is not.
    ModelConfig dense_c = c;
    dense_c.mla_sparse_attention.reset();
    const double d = rel_err(ref, naive(dense_c, w, x), ref);
    if (GetParam() == "sparse_every_block")
      EXPECT_LE(d, kTol) << "every block read must be dense attention";
    else
      EXPECT_GT(d, 0.05) << GetParam() << " vs dense";
    std::printf("[ %s ] differs from dense by %.3g (relative)\n", GetParam().c_str(), d);
  }
  const MlaDecoder dec(c, w, kLayer);

  MlaCache cache = dec.make_cache();
  const Tensor dec_out = decode_all(dec, x, cache);
  EXPECT_EQ(cache.size(), kT);
  const double e_dec = rel_err(dec_out, ref, ref);
  EXPECT_LE(e_dec, kTol) << GetParam() << ": token-by-token decode";

  MlaCache cache2 = dec.make_cache();
  const Tensor pf_out = prefill_then_decode(dec, x, cache2, 450, 100);  // 100 x 4 + 50, then 70 steps
  const double e_pf = rel_err(pf_out, ref, ref);
  EXPECT_LE(e_pf, kTol) << GetParam() << ": chunked prefill + decode";

  // One prefill of everything (tiles of 64 queries, many pages) as well.
  MlaCache cache3 = dec.make_cache(100);
  const Tensor one = dec.prefill(x, 0, cache3);
  const double e_one = rel_err(one, ref, ref);
  EXPECT_LE(e_one, kTol) << GetParam() << ": one prefill";

  // The caches agree whichever way they were filled (same rows up to f32 association of the projections).
  double cache_diff = 0.0;
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t j = 0; j < cache.row_width(); ++j)
      cache_diff = std::max(cache_diff, double(std::fabs(cache.row(t)[j] - cache2.row(t)[j])));
  EXPECT_LE(cache_diff, 1e-5);
  if (c.mla_sparse_attention) {
    // Sparse prefill both ways (the masked dense tiles and the gathered keys; kAuto picks one by length), in one
    // call and in chunks of 100 (later chunks' queries mask keys cached before them).
    for (const auto way : {MlaDecoder::SparsePrefill::kMasked, MlaDecoder::SparsePrefill::kGathered}) {
      MlaDecoder d(c, w, kLayer);
      d.sparse_prefill = way;
      const char* name = way == MlaDecoder::SparsePrefill::kMasked ? "masked" : "gathered";
      MlaCache whole = d.make_cache(100);
      EXPECT_LE(rel_err(d.prefill(x, 0, whole), ref, ref), kTol) << GetParam() << ": one " << name << " prefill";
      MlaCache chunked = d.make_cache();
      EXPECT_LE(rel_err(prefill_then_decode(d, x, chunked, kT, 100), ref, ref), kTol)
          << GetParam() << ": " << name << " prefill in chunks";
    }
    // A shared prefix keeps its block means: one ending on a block boundary (448) and ones inside a block (300 of
    // the 100-token pages: its partial block is summed again from the rows; 250: inside a page too, which the prefix
    // copies); decoding on from each gives the rest, and leaves the cache it came from as it was.
    for (auto [from, n] : {std::pair<MlaCache*, int64_t>{&cache, 448}, {&cache3, 300}, {&cache3, 250}}) {
      std::vector<float> before(size_t(from->row_width())), after(before.size());
      from->row_f32(n, before.data());
      MlaCache shared = from->share_prefix(n);
      Tensor rest = Tensor::empty({kT - n, c.hidden_size});
      for (int64_t t = n; t < kT; ++t) set_row(rest, t - n, dec.step(x.select(0, t), t, shared));
      EXPECT_LE(rel_err(rest, ref.slice(0, n, kT), ref), kTol) << GetParam() << ": decode after a prefix of " << n;
      from->row_f32(n, after.data());
      EXPECT_EQ(before, after) << "the prefix of " << n << " wrote into its source's page";
    }
  }
  std::printf("[ %s ] rel. error vs naive: decode %.2e, prefill(100)+decode %.2e, one prefill %.2e; scale %.6f\n",
              GetParam().c_str(), e_dec, e_pf, e_one, double(dec.softmax_scale()));
}

INSTANTIATE_TEST_SUITE_P(Tiny, MlaVariant,
                         testing::Values("nope", "rope", "rope_yarn", "no_q_lora", "gate_off", "eight_heads",
                                         "eight_heads_rope", "sparse", "sparse_rope", "sparse_every_block", "logn",
                                         "sparse_logn"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// BlockMeans (tiles of kTile blocks, columns side by side): each complete block's mean is its rows' sum in order
// times 1 / B (bit-equal to that loop), the scores match double dot products, and a prefix ending inside a tile and
// inside a block, continued with the same rows, holds the same floats as the whole sequence (decode after a
// shared prefix chooses as the whole prefill would).
TEST(SparseMla, BlockMeansKeepEveryBlocksMeanAndScoreIt) {
  const int64_t B = 3, W = 5, N = 100;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(N * W)), qbar(static_cast<size_t>(W));
  for (float& e : rows) e = nd(rng);
  for (float& e : qbar) e = nd(rng);
  BlockMeans all(B, W);
  for (int64_t t = 0; t < N; ++t) all.append(rows.data() + t * W);
  ASSERT_EQ(all.complete(), N / B);  // 33 blocks: three tiles, the last partly filled
  std::vector<float> score(size_t(all.complete()));
  all.score(qbar.data(), all.complete(), score.data());
  for (int64_t b = 0; b < all.complete(); ++b) {
    double dot = 0.0;
    for (int64_t i = 0; i < W; ++i) {
      float sum = 0.0f;
      for (int64_t t = b * B; t < (b + 1) * B; ++t) sum += rows[size_t(t * W + i)];
      EXPECT_EQ(all.mean(b, i), sum * (1.0f / float(B))) << "block " << b << " element " << i;
      dot += double(qbar[size_t(i)]) * double(all.mean(b, i));
    }
    EXPECT_NEAR(score[size_t(b)], dot, 1e-5 * (1.0 + std::abs(dot))) << "block " << b;  // f32 sums of 5 products
  }
  for (int64_t n : {52, 48, 3, 1}) {
    BlockMeans part = all.prefix(n, [&](int64_t t, float* out) { std::copy_n(rows.data() + t * W, W, out); });
    ASSERT_EQ(part.complete(), n / B);
    for (int64_t t = n; t < N; ++t) part.append(rows.data() + t * W);
    std::vector<float> again(size_t(all.complete()));
    part.score(qbar.data(), part.complete(), again.data());
    EXPECT_EQ(again, score) << "a prefix of " << n << " rows continued";
  }
}

// The block choice of block-sparse MLA (model/sparse_mla.h) against its definition computed in double the long way:
// per-head keys k_nope = W_uk c_kv materialised, each head's logits averaged over the block's tokens, summed over
// the heads, the top_k candidates taken by a full sort. Random inputs (no ties within f32 rounding).
TEST(SparseMla, ChoosesTheBlocksWithTheHighestMeanLogitSummedOverHeads) {
  const int64_t T = 200, H = 4, Dn = 16, Dr = 8, C = 32, Dv = 16, Dq = Dn + Dr;
  const SparseMlaConfig sp{8, 4, 16};
  const float scale = 0.2f;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = nd(rng);
    return v;
  };
  const std::vector<float> q = rnd(T * H * Dq), c_kv = rnd(T * C), k_pe = rnd(T * Dr), kvb = rnd(H * (Dn + Dv) * C);
  const Tensor blocks = sparse_mla_blocks(sp, Tensor::from_vector(q, {T, H * Dq}), Tensor::from_vector(c_kv, {T, C}),
                                          Tensor::from_vector(k_pe, {T, Dr}), H, Dn, kvb.data(), (Dn + Dv) * C, scale);
  ASSERT_EQ(blocks.shape(), (Shape{1, T, sp.top_k}));
  int64_t queries_choosing = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t cand = std::max<int64_t>(0, t / sp.block_size - sp.local_blocks());
    std::vector<std::pair<double, int32_t>> score;
    for (int64_t b = 0; b < cand; ++b) {
      double total = 0.0;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = b * sp.block_size; j < (b + 1) * sp.block_size; ++j) {
          double logit = 0.0;
          for (int64_t n = 0; n < Dn; ++n) {
            double k = 0.0;
            for (int64_t e = 0; e < C; ++e)
              k += double(kvb[size_t((h * (Dn + Dv) + n) * C + e)]) * c_kv[size_t(j * C + e)];
            logit += double(q[size_t(t * H * Dq + h * Dq + n)]) * k;
          }
          for (int64_t e = 0; e < Dr; ++e)
            logit += double(q[size_t(t * H * Dq + h * Dq + Dn + e)]) * k_pe[size_t(j * Dr + e)];
          total += scale * logit / double(sp.block_size);
        }
      score.push_back({-total, int32_t(b)});
    }
    std::sort(score.begin(), score.end());
    std::vector<int32_t> want;
    for (int64_t i = 0; i < std::min<int64_t>(cand, sp.top_k); ++i) want.push_back(score[size_t(i)].second);
    std::sort(want.begin(), want.end());
    want.resize(size_t(sp.top_k), -1);
    const int32_t* got = blocks.data<int32_t>() + t * sp.top_k;
    EXPECT_EQ(std::vector<int32_t>(got, got + sp.top_k), want) << "query " << t;
    queries_choosing += cand > sp.top_k;
    // Its keys: the chosen blocks, then [first local block, t].
    const std::vector<KeyRange> r = sparse_mla_ranges(sp, t, got);
    ASSERT_FALSE(r.empty());
    EXPECT_EQ(r.back().end, t + 1);
    EXPECT_EQ(r.back().begin <= cand * sp.block_size, true);
  }
  EXPECT_GT(queries_choosing, 100);  // most queries really choose (more candidates than top_k)
}

TEST(MlaDecoder, SoftmaxScaleIncludesYarnMscaleOnlyWithRope) {
  const float base = 1.0f / std::sqrt(float(16 + 8));
  EXPECT_FLOAT_EQ(MlaDecoder(variant("nope"), ModelWeights::random(variant("nope"), 1), kLayer).softmax_scale(), base);
  EXPECT_FLOAT_EQ(MlaDecoder(variant("rope"), ModelWeights::random(variant("rope"), 1), kLayer).softmax_scale(), base);
  const double m = 0.1 * 0.707 * std::log(8.0) + 1.0;
  EXPECT_FLOAT_EQ(
      MlaDecoder(variant("rope_yarn"), ModelWeights::random(variant("rope_yarn"), 1), kLayer).softmax_scale(),
      base * float(m * m));
  // YaRN configured but NoPE: no rotation, no factor.
  json j = tiny_json();
  j["rope_scaling"] = {
      {"type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 64}, {"mscale_all_dim", 1.0}};
  const ModelConfig c = parse_model_config(j, "tiny/nope_yarn", nullptr);
  EXPECT_FLOAT_EQ(MlaDecoder(c, ModelWeights::random(c, 1), kLayer).softmax_scale(), base);
}

// Gate off is plain MLA (checked against the naive form in the variant suite); with the gate the output is the same
// attention times sigmoid(W_g x), before o_proj: computed here by hand (double) from the pre-o_proj tensor.
TEST(MlaDecoder, OutputGateIsTheSigmoidFactorBeforeOProj) {
  const ModelConfig cg = tiny(), c0 = variant("gate_off");
  ASSERT_TRUE(cg.mla_use_output_gate);
  const ModelWeights wg = sharp_weights(cg, kSeed), w0 = sharp_weights(c0, kSeed);
  const std::string a = "model.layers.3.self_attn.";
  EXPECT_TRUE(wg.contains(a + "g_proj.weight"));
  EXPECT_FALSE(w0.contains(a + "g_proj.weight"));
  // Init is per tensor name: every other tensor is the same in both.
  for (const char* n : {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"}) {
    const std::vector<float> u = wg.at(a + n + ".weight").value().to_vector(),
                             v = w0.at(a + n + ".weight").value().to_vector();
    ASSERT_EQ(u, v) << n;
  }
  const int64_t T = 130, D = cg.hidden_size, HV = cg.num_attention_heads * cg.v_head_dim;
  const Tensor x = random_input(T, D, 11);
  const MlaDecoder dg(cg, wg, kLayer), d0(c0, w0, kLayer);
  MlaCache kg = dg.make_cache(), k0 = d0.make_cache();
  Tensor attn_g, attn_0;
  const Tensor yg = dg.prefill(x, 0, kg, &attn_g), y0 = d0.prefill(x, 0, k0, &attn_0);
  ASSERT_EQ(attn_g.shape(), (Shape{T, HV}));
  EXPECT_EQ(attn_g.to_vector(), attn_0.to_vector()) << "the attention before the gate must not depend on it";
  EXPECT_LE(rel_err(y0, naive(c0, w0, x), y0), kTol);
  EXPECT_LE(rel_err(yg, naive(cg, wg, x), yg), kTol);

  const std::vector<float> A = attn_0.to_vector(), X = x.to_vector(),
                           Wg = wg.at(a + "g_proj.weight").value().to_vector(),
                           Wo = wg.at(a + "o_proj.weight").value().to_vector();
  std::vector<double> gated(static_cast<size_t>(T * HV));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < HV; ++i) {
      double g = 0.0;
      for (int64_t d = 0; d < D; ++d) g += double(Wg[size_t(i * D + d)]) * X[size_t(t * D + d)];
      gated[size_t(t * HV + i)] = A[size_t(t * HV + i)] / (1.0 + std::exp(-g));
    }
  auto o_proj = [&](const std::vector<double>& in) {
    std::vector<float> y(static_cast<size_t>(T * D));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        double s = 0.0;
        for (int64_t i = 0; i < HV; ++i) s += double(Wo[size_t(d * HV + i)]) * in[size_t(t * HV + i)];
        y[size_t(t * D + d)] = float(s);
      }
    return Tensor::from_vector(y, {T, D});
  };
  const Tensor by_hand_g = o_proj(gated);
  const Tensor by_hand_0 = o_proj(std::vector<double>(A.begin(), A.end()));
  EXPECT_LE(rel_err(yg, by_hand_g, by_hand_g), 1e-5);
  EXPECT_LE(rel_err(y0, by_hand_0, by_hand_0), 1e-5);
  EXPECT_GT(rel_err(yg, y0, y0), 0.1) << "the gate must change the output";

  // The same through step.
  MlaCache s = dg.make_cache();
  Tensor attn_step;
  for (int64_t t = 0; t < T; ++t) dg.step(x.select(0, t), t, s, &attn_step);
  EXPECT_LE(rel_err(attn_step, attn_0.select(0, T - 1), attn_0.select(0, T - 1)), kTol);
}

// The cache holds normed c_kv and the raw (NoPE) k_pe; bytes = pages x page_tokens x (C + Dr) x 4.
TEST(MlaCache, ContentsAndBytes) {
  const ModelConfig c = tiny();
  const ModelWeights w = ModelWeights::random(c, kSeed);
  const int64_t C = c.kv_lora_rank, Dr = c.qk_rope_head_dim, D = c.hidden_size;
  const Tensor x = random_input(kT, D, 3);
  const MlaDecoder dec(c, w, kLayer);
  for (int64_t page : {int64_t(1), int64_t(64), int64_t(100), int64_t(1000)}) {
    MlaCache cache = dec.make_cache(page);
    EXPECT_EQ(cache.bytes(), 0u);
    dec.prefill(x.slice(0, 0, 300), 0, cache);
    for (int64_t t = 300; t < kT; ++t) dec.step(x.select(0, t), t, cache);
    EXPECT_EQ(cache.size(), kT);
    const int64_t pages = (kT + page - 1) / page;
    EXPECT_EQ(cache.num_pages(), pages);
    EXPECT_EQ(cache.bytes(), size_t(pages * page * (C + Dr) * 4)) << "page " << page;
    if (page == 64) {
      EXPECT_EQ(cache.bytes(), 92160u);  // 9 pages x 64 x 40 x 4
    }
    cache.clear();
    EXPECT_EQ(cache.size(), 0);
    EXPECT_EQ(cache.bytes(), 0u);
  }
  // Row t = [RMSNorm(c_kv) | k_pe] of [c_kv | k_pe] = W_kva x_t, checked by hand.
  MlaCache cache = dec.make_cache();
  dec.prefill(x.slice(0, 0, 70), 0, cache);
  const std::vector<float> W = w.at("model.layers.3.self_attn.kv_a_proj_with_mqa.weight").value().to_vector();
  const std::vector<float> nw = w.at("model.layers.3.self_attn.kv_a_layernorm.weight").value().to_vector();
  const std::vector<float> X = x.to_vector();
  double err = 0.0;
  for (int64_t t : {int64_t(0), int64_t(63), int64_t(64), int64_t(69)}) {
    std::vector<double> kv(static_cast<size_t>(C + Dr), 0.0);
    for (int64_t i = 0; i < C + Dr; ++i)
      for (int64_t d = 0; d < D; ++d) kv[size_t(i)] += double(W[size_t(i * D + d)]) * X[size_t(t * D + d)];
    double ss = 0.0;
    for (int64_t i = 0; i < C; ++i) ss += kv[size_t(i)] * kv[size_t(i)];
    const double rs = 1.0 / std::sqrt(ss / double(C) + 1e-6);
    for (int64_t i = 0; i < C; ++i)
      err = std::max(err, std::fabs(cache.c_kv(t)[i] - kv[size_t(i)] * rs * nw[size_t(i)]));
    for (int64_t i = 0; i < Dr; ++i) err = std::max(err, std::fabs(cache.k_pe(t)[i] - kv[size_t(C + i)]));
  }
  EXPECT_LE(err, 1e-5);
  // Appending rows directly.
  MlaCache raw(4, 2, 3);
  raw.append(Tensor::from_vector(std::vector<float>(20, 1.0f), {5, 4}),
             Tensor::from_vector(std::vector<float>(10, 2.0f), {5, 2}));
  EXPECT_EQ(raw.size(), 5);
  EXPECT_EQ(raw.num_pages(), 2);
  EXPECT_EQ(raw.page_rows(1), 2);
  EXPECT_EQ(raw.bytes(), size_t(2 * 3 * 6 * 4));
  EXPECT_EQ(raw.k_pe(4)[1], 2.0f);
}

TEST(MlaDecoder, RejectsWrongLayerAndCache) {
  const ModelConfig c = tiny();
  const ModelWeights w = ModelWeights::random(c, kSeed);
  EXPECT_THROW(MlaDecoder(c, w, 0), Error);  // a KDA layer
  EXPECT_THROW(MlaDecoder(c, w, 4), Error);  // out of range
  const MlaDecoder dec(c, w, kLayer);
  MlaCache wrong(c.kv_lora_rank + 1, c.qk_rope_head_dim);
  EXPECT_THROW(dec.step(Tensor::zeros({c.hidden_size}), 0, wrong), Error);
  MlaCache ok = dec.make_cache();
  EXPECT_THROW(dec.step(Tensor::zeros({c.hidden_size + 1}), 0, ok), Error);
  EXPECT_THROW(dec.prefill(Tensor::zeros({c.hidden_size}), 0, ok), Error);
  EXPECT_EQ(ok.size(), 0);
  EXPECT_EQ(dec.prefill(Tensor::zeros({0, c.hidden_size}), 0, ok).shape(), (Shape{0, c.hidden_size}));
}

// At 4096+ tokens of context step splits the pages across threads (4 forced here) and merges the partial softmaxes:
// it must equal prefill of the same token (one chunk of 1: per-head sgemm, no split) on a deep copy of the cache.
TEST(MlaDecoder, SplitContextStepEqualsPrefill) {
  const ModelConfig c = variant("rope_yarn");
  const ModelWeights w = sharp_weights(c, kSeed);
  const MlaDecoder dec(c, w, kLayer);
  const int64_t ctx = 4100;
  const Tensor x = random_input(ctx + 8, c.hidden_size, 9);
  MlaCache cache = dec.make_cache();
  for (int64_t t0 = 0; t0 < ctx; t0 += 1000) dec.prefill(x.slice(0, t0, std::min(ctx, t0 + 1000)), t0, cache);
  const int prev = num_threads();
  set_num_threads(4);
  double err = 0.0;
  for (int64_t t = ctx; t < ctx + 8; ++t) {
    MlaCache copy = cache.clone();
    const Tensor by_step = dec.step(x.select(0, t), t, cache);
    const Tensor by_prefill = dec.prefill(x.slice(0, t, t + 1), t, copy).view({c.hidden_size});
    err = std::max(err, rel_err(by_step, by_prefill, by_prefill));
    EXPECT_EQ(copy.size(), cache.size());
  }
  set_num_threads(prev);
  EXPECT_LE(err, kTol);
  std::printf("[ split ] step (4 parts) vs prefill at %lld context: rel. error %.2e\n", (long long)ctx, err);
}

// Decode speed at a 4096-token context (printed, not asserted).
TEST(MlaDecoder, DecodeSpeedAt4kContext) {
  const ModelConfig c = tiny();
  const ModelWeights w = ModelWeights::random(c, kSeed);
  const MlaDecoder dec(c, w, kLayer);
  const int64_t ctx = 4096, steps = 256;
  const Tensor x = random_input(ctx + steps, c.hidden_size, 5);
  MlaCache cache = dec.make_cache();
  const auto p0 = std::chrono::steady_clock::now();
  for (int64_t t0 = 0; t0 < ctx; t0 += 512) dec.prefill(x.slice(0, t0, t0 + 512), t0, cache);
  const auto p1 = std::chrono::steady_clock::now();
  for (int64_t t = ctx; t < ctx + steps; ++t) dec.step(x.select(0, t), t, cache);
  const auto p2 = std::chrono::steady_clock::now();
  const double pf = std::chrono::duration<double>(p1 - p0).count(), st = std::chrono::duration<double>(p2 - p1).count();
  std::printf(
      "[ speed ] tiny MLA layer: prefill %lld tokens in chunks of 512: %.0f tokens/s; decode at %lld..%lld "
      "context: %.0f tokens/s (%.1f us/token), cache %.2f MB\n",
      (long long)ctx, double(ctx) / pf, (long long)ctx, (long long)(ctx + steps), double(steps) / st,
      1e6 * st / double(steps), double(cache.bytes()) / 1e6);
  EXPECT_EQ(cache.size(), ctx + steps);
}

}  // namespace
}  // namespace myriad

namespace myriad {
namespace {

TEST(MlaCache, Bf16RowsAreRoundedAndHalfTheBytes) {
  MlaCache f(16, 8, 4), b(16, 8, 4, DType::kBF16);
  std::mt19937 rng(5);
  std::normal_distribution<float> n01(0.0f, 2.0f);
  std::vector<std::vector<float>> rows;
  for (int t = 0; t < 6; ++t) {
    std::vector<float> r(24);
    for (float& v : r) v = n01(rng);
    f.append(r.data(), r.data() + 16);
    b.append(r.data(), r.data() + 16);
    rows.push_back(r);
  }
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(b.bytes() * 2, f.bytes());
  EXPECT_EQ(b.bytes(), MlaCache::page_bytes(16, 8, 4, DType::kBF16) * 2);
  std::vector<float> got(24);
  for (int t = 0; t < 6; ++t) {
    b.row_f32(t, got.data());
    for (int i = 0; i < 24; ++i) EXPECT_EQ(got[size_t(i)], bf16_to_f32(f32_to_bf16(rows[size_t(t)][size_t(i)])));
  }
  const MlaCache c = b.clone(), s = b.share_prefix(4);
  EXPECT_EQ(c.dtype(), DType::kBF16);
  EXPECT_EQ(s.dtype(), DType::kBF16);
  EXPECT_EQ(s.page_bf16(0), b.page_bf16(0));  // shared, not copied
  EXPECT_THROW(MlaCache(16, 8, 4, DType::kF16), Error);
}

// A bf16 latent cache against the f32 one, through chunked prefill (the cache widened for sgemm) and decode (bf16
// page scores, with vdpbf16ps where the CPU has it, which rounds the queries to bf16 too): 8 heads, sharp weights
// (scores O(1..10), a peaked softmax). Rounding a cached value or a query element to bf16 (relative error <= 2^-9)
// moves a score by up to ~2^-8 of sum |q_i k_i|, a few hundredths at these scores, which the peaked softmax turns
// into output changes of ~1e-2 relative (measured: 7e-3 prefill, 1.4e-2 decode with native bf16 products):
// bounded by 3e-2. A wrong page, row or head would be off by O(1).
// Chunked prefill (300 tokens in chunks of 100) then 20 decode steps on a cache of `dtype` and on an f32 one, same
// inputs: the largest relative output difference of the prefill chunks and of the decode steps.
struct CacheErrors {
  double prefill = 0, decode = 0;
};
CacheErrors cache_vs_f32(DType dtype) {
  const ModelConfig c = variant("eight_heads");
  const ModelWeights w = sharp_weights(c, kSeed);
  const MlaDecoder dec(c, w, kLayer);
  const int64_t ctx = 300;
  const Tensor x = random_input(ctx + 20, c.hidden_size, 11);
  MlaCache f = dec.make_cache(64), q = dec.make_cache(64, dtype);
  CacheErrors e;
  for (int64_t t0 = 0; t0 < ctx; t0 += 100) {
    const Tensor of = dec.prefill(x.slice(0, t0, t0 + 100), t0, f);
    const Tensor oq = dec.prefill(x.slice(0, t0, t0 + 100), t0, q);
    e.prefill = std::max(e.prefill, rel_err(oq, of, of));
  }
  for (int64_t t = ctx; t < ctx + 20; ++t) {
    const Tensor of = dec.step(x.select(0, t), t, f);
    const Tensor oq = dec.step(x.select(0, t), t, q);
    e.decode = std::max(e.decode, rel_err(oq, of, of));
  }
  EXPECT_EQ(q.size(), f.size());
  return e;
}

TEST(MlaDecoder, Bf16CacheFollowsTheF32Cache) {
  const CacheErrors e = cache_vs_f32(DType::kBF16);
  EXPECT_LE(e.prefill, 3e-2);
  EXPECT_LE(e.decode, 3e-2);
  EXPECT_GT(e.decode, 0.0);  // the rounding is really there
  std::printf("[ bf16 ] cache vs f32 cache: rel. error prefill %.2e, decode %.2e (bf16 dot products: %s)\n", e.prefill,
              e.decode, ops::bf16_dot_native(Device::kCPU) ? "native" : "widened to f32");
}

TEST(MlaCache, Q8RowsAreWithinHalfAStepAndShareTheirPages) {
  MlaCache f(40, 8, 16), q(40, 8, 16, DType::kQ8_0);
  std::mt19937 rng(6);
  std::normal_distribution<float> n01(0.0f, 2.0f);
  std::vector<std::vector<float>> rows;
  for (int t = 0; t < 20; ++t) {
    std::vector<float> r(48);
    for (float& v : r) v = n01(rng);
    f.append(r.data(), r.data() + 40);
    q.append(r.data(), r.data() + 40);
    rows.push_back(r);
  }
  EXPECT_EQ(q.dtype(), DType::kQ8_0);
  EXPECT_EQ(q.num_pages(), 2);
  EXPECT_EQ(q.bytes(), MlaCache::page_bytes(40, 8, 16, DType::kQ8_0) * 2);
  // Per token 4 ceil(W / 4) key bytes + C rounded up to 32 value bytes + 4 per group of 32 (latent_q8.h): 120 here
  // (f32: 192), 308 at the small config's 128 + 32 (f32: 640), 1160 at K3's 512 + 64 (f32: 2304).
  EXPECT_EQ(MlaCache::page_bytes(40, 8, 16, DType::kQ8_0), size_t(16 * (48 + 64 + 8)));
  EXPECT_EQ(MlaCache::page_bytes(128, 32, 64, DType::kQ8_0), size_t(64 * (160 + 128 + 20)));
  EXPECT_EQ(MlaCache::page_bytes(512, 64, 64, DType::kQ8_0), size_t(64 * (576 + 512 + 72)));
  std::vector<float> got(48);
  for (int t = 0; t < 20; ++t) {
    q.row_f32(t, got.data());
    for (int g = 0; g < 2; ++g) {  // groups [0, 32) and [32, 48)
      float amax = 0;
      for (int i = 32 * g; i < std::min(48, 32 * g + 32); ++i)
        amax = std::max(amax, std::fabs(rows[size_t(t)][size_t(i)]));
      for (int i = 32 * g; i < std::min(48, 32 * g + 32); ++i)
        EXPECT_LE(std::fabs(got[size_t(i)] - rows[size_t(t)][size_t(i)]), amax / 254.0f * 1.0001f) << t << " " << i;
    }
  }
  const MlaCache c = q.clone(), s = q.share_prefix(16);
  EXPECT_EQ(c.dtype(), DType::kQ8_0);
  EXPECT_EQ(s.page_q8(0), q.page_q8(0));  // shared, not copied
  EXPECT_NE(c.page_q8(0), q.page_q8(0));
  c.row_f32(19, got.data());
  std::vector<float> again(48);
  q.row_f32(19, again.data());
  EXPECT_EQ(got, again);
}

// An int8 latent cache against the f32 one, as the bf16 test above: chunked prefill (the cache dequantized for
// sgemm) and decode (queries quantized like the rows, integer page products). A cached value or a query element
// moves by at most 1/254 of its group's largest (bf16: 2^-9 of itself), so a score by up to ~2/254 of
// sum |q_i k_i| in the worst case: ~4x the bf16 bound; on random data the errors are independent and the output
// changes by a few 1e-2 relative through the peaked softmax (measured below), bounded by 1e-1. A wrong page, row,
// group scale or head is off by O(1).
TEST(MlaDecoder, Q8CacheFollowsTheF32Cache) {
  const CacheErrors e = cache_vs_f32(DType::kQ8_0);
  EXPECT_LE(e.prefill, 1e-1);
  EXPECT_LE(e.decode, 1e-1);
  EXPECT_GT(e.decode, 0.0);
  std::printf("[ q8 ] cache vs f32 cache: rel. error prefill %.2e, decode %.2e (int8 products: %s)\n", e.prefill,
              e.decode, ops::latent_q8_native(Device::kCPU) ? "VNNI" : "portable");
}

}  // namespace
}  // namespace myriad
