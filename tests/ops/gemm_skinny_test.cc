// cpu::gemm_skinny (decode-sized products) against a double-precision loop, over shapes that exercise the
// four-row blocks and their remainder, one and several threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/kernels.h"

namespace myriad {
namespace {

TEST(GemmSkinny, MatchesADoubleLoop) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  struct Case {
    int64_t n, N, K;
  };
  for (const Case c :
       {Case{1, 1, 1}, Case{1, 7, 33}, Case{3, 13, 160}, Case{16, 257, 512}, Case{5, 600, 300}, Case{2, 4, 0}}) {
    std::vector<float> X(static_cast<size_t>(c.n * c.K)), W(static_cast<size_t>(c.N * c.K));
    for (float& v : X) v = n01(rng);
    for (float& v : W) v = n01(rng);
    const int64_t ldy = c.N + 3;  // a row stride wider than the output, whose gaps must stay untouched
    std::vector<float> Y(static_cast<size_t>(c.n * ldy), -7.0f);
    cpu::gemm_skinny(c.n, c.N, c.K, X.data(), W.data(), Y.data(), ldy);
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t r = 0; r < c.N; ++r) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          ref += double(X[size_t(i * c.K + k)]) * double(W[size_t(r * c.K + k)]);
          mag += std::abs(double(X[size_t(i * c.K + k)]) * double(W[size_t(r * c.K + k)]));
        }
        // f32 accumulation in a different order: a few units of rounding of the sum of magnitudes.
        EXPECT_NEAR(Y[size_t(i * ldy + r)], ref, 1e-6 * mag + 1e-7) << c.n << "x" << c.N << "x" << c.K;
      }
      for (int64_t r = c.N; r < ldy; ++r) EXPECT_EQ(Y[size_t(i * ldy + r)], -7.0f);
    }
  }
}

}  // namespace
}  // namespace myriad
