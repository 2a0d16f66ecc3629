// The int8 latent-cache page (cpu::latent_q8_*): the quantization bound of a stored row, and the two decode
// products against double-precision loops over the dequantized codes, over shapes that exercise partial groups,
// blocks, pairs, head tiles and the int32 flush of long pages.
#include "ops/cpu/latent_q8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace myriad {
namespace {

struct Shape {
  int64_t C, Dr, P, n, H;
};

// A page of n random rows whose groups have very different magnitudes (what per-group scales are for).
std::vector<float> random_rows(const Shape& s, std::mt19937& rng) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int64_t W = s.C + s.Dr;
  std::vector<float> rows(static_cast<size_t>(s.n * W));
  for (int64_t t = 0; t < s.n; ++t)
    for (int64_t d = 0; d < W; ++d) rows[size_t(t * W + d)] = n01(rng) * std::pow(3.0f, float((d / 32 + t) % 4) - 2);
  return rows;
}

// A page of shape s holding n random rows, and those rows as stored (dequantized) [n, W].
struct FilledPage {
  LatentQ8Layout l;
  std::vector<float> rows, stored;
  std::vector<uint8_t> page;
};
FilledPage fill_page(const Shape& s, std::mt19937& rng) {
  FilledPage f{LatentQ8Layout(s.C, s.Dr, s.P), random_rows(s, rng), {}, {}};
  f.page.resize(f.l.bytes);
  ops::latent_q8_init_page(Device::kCPU, f.l, f.page.data());
  for (int64_t t = 0; t < s.n; ++t)
    ops::latent_q8_store_row(Device::kCPU, f.l, f.page.data(), t, f.rows.data() + t * f.l.W);
  f.stored.resize(static_cast<size_t>(s.n * f.l.W));
  ops::latent_q8_load_rows(Device::kCPU, f.l, f.page.data(), 0, s.n, f.stored.data(), f.l.W);
  return f;
}

const Shape kShapes[] = {{128, 32, 64, 64, 8}, {128, 32, 64, 37, 8},  {40, 12, 37, 37, 11}, {40, 12, 37, 5, 3},
                         {16, 0, 16, 1, 1},    {512, 64, 64, 64, 16}, {64, 8, 600, 600, 5}, {33, 3, 9, 8, 4}};

TEST(LatentQ8, StoredRowsAreWithinHalfAStepOfTheirGroup) {
  std::mt19937 rng(1);
  for (const Shape& s : kShapes) {
    const FilledPage f = fill_page(s, rng);
    const LatentQ8Layout& l = f.l;
    const std::vector<float>& rows = f.rows;
    const std::vector<float>& back = f.stored;
    for (int64_t t = 0; t < s.n; ++t)
      for (int64_t g = 0; g * 32 < l.W; ++g) {
        float amax = 0;
        for (int64_t d = g * 32; d < std::min(l.W, g * 32 + 32); ++d)
          amax = std::max(amax, std::fabs(rows[size_t(t * l.W + d)]));
        const float step = amax / 127.0f;
        for (int64_t d = g * 32; d < std::min(l.W, g * 32 + 32); ++d)
          EXPECT_LE(std::fabs(back[size_t(t * l.W + d)] - rows[size_t(t * l.W + d)]), 0.5f * step * (1 + 1e-5f))
              << "token " << t << " column " << d;
      }
  }
}

TEST(LatentQ8, ScoresMatchADoubleLoopOverTheDequantizedCodes) {
  std::mt19937 rng(2);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (const Shape& s : kShapes) {
    const FilledPage f = fill_page(s, rng);
    const LatentQ8Layout& l = f.l;
    const std::vector<float>& rows = f.rows;
    const std::vector<uint8_t>& page = f.page;
    const std::vector<float>& keys = f.stored;
    std::vector<float> q(static_cast<size_t>(s.H * l.W));
    for (float& v : q) v = n01(rng);
    LatentQ8Query qq;
    ops::latent_q8_quantize_query(Device::kCPU, l, q.data(), s.H, l.W, qq);
    const int64_t lds = s.n + 5;
    std::vector<float> S(static_cast<size_t>(s.H * lds), -9.0f), Sp(S);
    ops::latent_q8_scores(Device::kCPU, l, page.data(), s.n, qq, S.data(), lds);
    cpu::latent_q8_scores_portable(l, page.data(), s.n, qq, Sp.data(), lds);
    for (int64_t h = 0; h < s.H; ++h) {
      // The query as the kernel sees it: each group's codes times its scale.
      std::vector<double> qd(static_cast<size_t>(l.W));
      for (int64_t d = 0; d < l.W; ++d)
        qd[size_t(d)] = double(qq.scale[size_t(h * l.groups + d / 32)]) * qq.codes[size_t(h * l.quads * 4 + d)];
      for (int64_t j = 0; j < s.n; ++j) {
        double ref = 0, mag = 0, exact = 0;
        for (int64_t d = 0; d < l.W; ++d) {
          ref += qd[size_t(d)] * keys[size_t(j * l.W + d)];
          mag += std::abs(qd[size_t(d)] * keys[size_t(j * l.W + d)]);
          exact += double(q[size_t(h * l.W + d)]) * rows[size_t(j * l.W + d)];
        }
        // Integer sums are exact; f32 rounds one product of scales and the sum over groups.
        EXPECT_NEAR(S[size_t(h * lds + j)], ref, 2e-6 * mag + 1e-30) << "head " << h << " token " << j;
        EXPECT_NEAR(S[size_t(h * lds + j)], Sp[size_t(h * lds + j)], 2e-6 * mag + 1e-30);
        // And near the unquantized score: both operands move by <= half a step of their group (< 1/254 of its
        // largest value), so the score by at most ~2 * (1/254) * the sum of magnitudes.
        EXPECT_NEAR(S[size_t(h * lds + j)], exact, 2.0 / 254.0 * mag * 1.01);
      }
      for (int64_t j = s.n; j < lds; ++j) EXPECT_EQ(S[size_t(h * lds + j)], -9.0f);
    }
  }
}

TEST(LatentQ8, ValuesMatchADoubleLoopOverTheDequantizedCodes) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  for (const Shape& s : kShapes) {
    const FilledPage f = fill_page(s, rng);
    const LatentQ8Layout& l = f.l;
    const std::vector<uint8_t>& page = f.page;
    const std::vector<float>& vals = f.stored;
    // Softmax-like weights: a few large, most tiny (what a peaked attention gives).
    const int64_t ldp = s.n + 2, ldo = s.C + 3;
    std::vector<float> p(static_cast<size_t>(s.H * ldp));
    for (float& v : p) v = std::pow(u01(rng), 6.0f);
    std::vector<float> o(static_cast<size_t>(s.H * ldo)), op;
    for (float& v : o) v = u01(rng);
    op = o;
    const std::vector<float> o0 = o;
    ops::latent_q8_values(Device::kCPU, l, page.data(), s.n, p.data(), ldp, s.H, o.data(), ldo);
    cpu::latent_q8_values_portable(l, page.data(), s.n, p.data(), ldp, s.H, op.data(), ldo);
    const float* sc = reinterpret_cast<const float*>(page.data() + l.scale_offset);
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t c = 0; c < s.C; ++c) {
        double ref = o0[size_t(h * ldo + c)], bound = 0, mag = std::abs(ref);
        // Each factor p s is rounded to 16 bits against the largest of its group and head: error <= fmax / 65534,
        // times |code| <= 127 per token.
        double fmax = 0;
        for (int64_t j = 0; j < s.n; ++j)
          fmax = std::max(fmax, double(p[size_t(h * ldp + j)]) * sc[(c / 32) * l.blocks * 16 + j]);
        for (int64_t j = 0; j < s.n; ++j) {
          ref += double(p[size_t(h * ldp + j)]) * vals[size_t(j * l.W + c)];
          mag += std::abs(double(p[size_t(h * ldp + j)]) * vals[size_t(j * l.W + c)]);
          bound += fmax / 65534.0 * 127.0;
        }
        // f32 rounds the partial sums (o0 plus one int32 sum per 256 tokens, each times its step), whose sizes the
        // magnitudes bound, not the (possibly cancelling) result: a few units of 2^-24 of them.
        const double f32 = 1e-6 * (mag + bound);
        EXPECT_NEAR(o[size_t(h * ldo + c)], ref, bound + f32) << "head " << h << " column " << c;
        EXPECT_NEAR(o[size_t(h * ldo + c)], op[size_t(h * ldo + c)], f32 + 1e-6 * bound);
      }
      for (int64_t c = s.C; c < ldo; ++c) EXPECT_EQ(o[size_t(h * ldo + c)], o0[size_t(h * ldo + c)]);
    }
  }
}

TEST(LatentQ8, ANonFiniteValueReachesItsTokensScoresAndTheValues) {
  const Shape s{40, 8, 16, 10, 2};
  std::mt19937 rng(4);
  const LatentQ8Layout l(s.C, s.Dr, s.P);
  std::vector<float> rows = random_rows(s, rng);
  rows[size_t(3 * l.W + 5)] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> page(l.bytes);
  ops::latent_q8_init_page(Device::kCPU, l, page.data());
  for (int64_t t = 0; t < s.n; ++t) ops::latent_q8_store_row(Device::kCPU, l, page.data(), t, rows.data() + t * l.W);
  std::vector<float> q(static_cast<size_t>(s.H * l.W), 0.5f), S(static_cast<size_t>(s.H * s.n));
  LatentQ8Query qq;
  ops::latent_q8_quantize_query(Device::kCPU, l, q.data(), s.H, l.W, qq);
  ops::latent_q8_scores(Device::kCPU, l, page.data(), s.n, qq, S.data(), s.n);
  for (int64_t j = 0; j < s.n; ++j) EXPECT_EQ(std::isnan(S[size_t(j)]), j == 3) << j;
  std::vector<float> p(static_cast<size_t>(s.H * s.n), 0.1f), o(static_cast<size_t>(s.H * s.C), 0.0f);
  ops::latent_q8_values(Device::kCPU, l, page.data(), s.n, p.data(), s.n, s.H, o.data(), s.C);
  EXPECT_TRUE(std::isnan(o[5]));    // column 5's group
  EXPECT_FALSE(std::isnan(o[35]));  // another group
}

}  // namespace
}  // namespace myriad
