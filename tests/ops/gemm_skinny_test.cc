// The few-row products (cpu::gemm_skinny for decode, gemm_skinny_nn and rank_update for MoE experts) against
// double-precision loops, over shapes that exercise their blocks and remainders.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/kernels.h"

namespace myriad {
namespace {

TEST(GemmSkinny, MatchesADoubleLoop) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  struct Case {
    int64_t n, N, K;
  };
  for (const Case c : {Case{1, 1, 1}, Case{1, 7, 33}, Case{3, 13, 160}, Case{16, 257, 512}, Case{5, 600, 300},
                       Case{8, 66, 17}, Case{4, 8, 5}, Case{2, 4, 0}}) {
    std::vector<float> X(static_cast<size_t>(c.n * c.K)), W(static_cast<size_t>(c.N * c.K));
    for (float& v : X) v = n01(rng);
    for (float& v : W) v = n01(rng);
    const int64_t ldy = c.N + 3;  // a row stride wider than the output, whose gaps must stay untouched
    std::vector<float> Y(static_cast<size_t>(c.n * ldy), -7.0f);
    ops::gemm_skinny(Device::kCPU, c.n, c.N, c.K, X.data(), W.data(), Y.data(), ldy);
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

std::vector<float> randn_vec(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = n01(rng);
  return v;
}

// Y [n, N] = (accumulate ? Y : 0) + X W, at strides wider than the rows (the gaps must stay untouched); shapes
// cover whole 16-column tiles, a remainder, four-row blocks and their remainder rows, K = 0.
TEST(GemmSkinnyNN, MatchesADoubleLoop) {
  std::mt19937 rng(5);
  struct Case {
    int64_t n, N, K;
  };
  for (const bool accumulate : {false, true})
    for (const Case c : {Case{1, 1, 1}, Case{1, 16, 7}, Case{3, 35, 64}, Case{4, 256, 256}, Case{7, 48, 1},
                         Case{16, 100, 130}, Case{2, 20, 0}}) {
      const int64_t ldx = c.K + 1, ldw = c.N + 2, ldy = c.N + 3;
      const std::vector<float> X = randn_vec(rng, c.n * ldx), W = randn_vec(rng, c.K * ldw);
      std::vector<float> Y = randn_vec(rng, c.n * ldy);
      const std::vector<float> Y0 = Y;
      ops::gemm_skinny_nn(Device::kCPU, c.n, c.N, c.K, X.data(), ldx, W.data(), ldw, Y.data(), ldy, accumulate);
      for (int64_t i = 0; i < c.n; ++i) {
        for (int64_t j = 0; j < c.N; ++j) {
          double ref = accumulate ? Y0[size_t(i * ldy + j)] : 0.0, mag = std::abs(ref);
          for (int64_t k = 0; k < c.K; ++k) {
            const double t = double(X[size_t(i * ldx + k)]) * double(W[size_t(k * ldw + j)]);
            ref += t;
            mag += std::abs(t);
          }
          EXPECT_NEAR(Y[size_t(i * ldy + j)], ref, 1e-6 * mag + 1e-7)
              << c.n << "x" << c.N << "x" << c.K << " accumulate " << accumulate << " at " << i << "," << j;
        }
        for (int64_t j = c.N; j < ldy; ++j) EXPECT_EQ(Y[size_t(i * ldy + j)], Y0[size_t(i * ldy + j)]);
      }
    }
}

// D [M, N] += A^T B with A [n, M], B [n, N]; shapes cover four-row blocks and remainders, a column remainder, n = 0.
TEST(RankUpdate, MatchesADoubleLoop) {
  std::mt19937 rng(6);
  struct Case {
    int64_t M, N, n;
  };
  for (const Case c :
       {Case{1, 1, 1}, Case{4, 16, 3}, Case{6, 33, 5}, Case{256, 256, 9}, Case{13, 64, 16}, Case{5, 18, 0}}) {
    const int64_t lda = c.M + 1, ldb = c.N + 2, ldd = c.N + 3;
    const std::vector<float> A = randn_vec(rng, c.n * lda), B = randn_vec(rng, c.n * ldb);
    std::vector<float> D = randn_vec(rng, c.M * ldd);
    const std::vector<float> D0 = D;
    ops::rank_update(Device::kCPU, c.M, c.N, c.n, A.data(), lda, B.data(), ldb, D.data(), ldd);
    for (int64_t r = 0; r < c.M; ++r) {
      for (int64_t j = 0; j < c.N; ++j) {
        double ref = D0[size_t(r * ldd + j)], mag = std::abs(ref);
        for (int64_t i = 0; i < c.n; ++i) {
          const double t = double(A[size_t(i * lda + r)]) * double(B[size_t(i * ldb + j)]);
          ref += t;
          mag += std::abs(t);
        }
        EXPECT_NEAR(D[size_t(r * ldd + j)], ref, 1e-6 * mag + 1e-7) << c.M << "x" << c.N << "x" << c.n;
      }
      for (int64_t j = c.N; j < ldd; ++j) EXPECT_EQ(D[size_t(r * ldd + j)], D0[size_t(r * ldd + j)]);
    }
  }
}

}  // namespace
}  // namespace myriad

namespace myriad {
namespace {

// Y = X W^T over bf16 operands (a bf16 MLA cache's page scores) against a double loop over the same bf16 values:
// every product of two bf16 numbers is exact in f32, so only the f32 summation order differs. Shapes cover 8-row
// blocks and their remainders, odd W rows, K below, at and past a 32-element step, and strides wider than K.
TEST(GemmSkinnyBf16, MatchesADoubleLoop) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  struct Case {
    int64_t n, N, K;
  };
  for (const Case c :
       {Case{1, 1, 1}, Case{8, 64, 160}, Case{3, 7, 31}, Case{11, 9, 33}, Case{16, 2, 64}, Case{5, 3, 0}}) {
    const int64_t ldx = c.K + 3, ldw = c.K + 5, ldy = c.N + 2;
    std::vector<uint16_t> X(static_cast<size_t>(c.n * ldx)), W(static_cast<size_t>(c.N * ldw));
    for (auto& v : X) v = f32_to_bf16(n01(rng));
    for (auto& v : W) v = f32_to_bf16(n01(rng));
    std::vector<float> Y(static_cast<size_t>(c.n * ldy), -7.0f);
    ops::gemm_skinny_bf16(Device::kCPU, c.n, c.N, c.K, X.data(), ldx, W.data(), ldw, Y.data(), ldy);
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t r = 0; r < c.N; ++r) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          const double t = double(bf16_to_f32(X[size_t(i * ldx + k)])) * double(bf16_to_f32(W[size_t(r * ldw + k)]));
          ref += t;
          mag += std::abs(t);
        }
        EXPECT_NEAR(Y[size_t(i * ldy + r)], ref, 1e-6 * mag + 1e-7) << c.n << "x" << c.N << "x" << c.K;
      }
      for (int64_t r = c.N; r < ldy; ++r) EXPECT_EQ(Y[size_t(i * ldy + r)], -7.0f);
    }
  }
}

TEST(Bf16Rows, RoundAndWidenAsTheScalarConversions) {
  std::mt19937 rng(8);
  std::normal_distribution<float> n01(0.0f, 3.0f);
  const int64_t n = 3, K = 37, lds = 40, ldb = 48;
  std::vector<float> src(static_cast<size_t>(n * lds));
  for (float& v : src) v = n01(rng);
  std::vector<uint16_t> b(static_cast<size_t>(n * ldb), 0xFFFF);
  ops::f32_to_bf16_rows(Device::kCPU, b.data(), ldb, src.data(), lds, n, K);
  std::vector<float> back(static_cast<size_t>(n * lds), -1.0f);
  ops::bf16_to_f32_rows(Device::kCPU, back.data(), lds, b.data(), ldb, n, K);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < K; ++k) {
      EXPECT_EQ(b[size_t(i * ldb + k)], f32_to_bf16(src[size_t(i * lds + k)]));
      EXPECT_EQ(back[size_t(i * lds + k)], bf16_to_f32(b[size_t(i * ldb + k)]));
      // round to nearest: within half a unit of the 8-bit significand
      EXPECT_LE(std::abs(back[size_t(i * lds + k)] - src[size_t(i * lds + k)]),
                std::abs(src[size_t(i * lds + k)]) * 0.00391f);
    }
    for (int64_t k = K; k < ldb; ++k) EXPECT_EQ(b[size_t(i * ldb + k)], 0) << "padding is zeroed";
    for (int64_t k = K; k < lds; ++k) EXPECT_EQ(back[size_t(i * lds + k)], -1.0f) << "past K untouched";
  }
}

}  // namespace
}  // namespace myriad
