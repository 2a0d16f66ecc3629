// GEMM through OpenBLAS (the machine's sgemm ceiling is what every other kernel is measured against).
#include <cblas.h>

#include "core/threads.h"
#include "ops/cpu/parallel.h"
#include "ops/kernels.h"

namespace myriad::cpu {

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
          int64_t stride_c) {
  if (M == 0 || N == 0 || batch == 0) return;
  for (int64_t b = 0; b < batch; ++b) {
    float* c = C + b * stride_c;
    if (K == 0) {  // BLAS may reject K = 0 leading dimensions; the product is empty: C = beta * C
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      continue;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                alpha, A + b * stride_a, int(lda), B + b * stride_b, int(ldb), beta, c, int(ldc));
  }
}

namespace {

// y[i][r] for X rows i0 .. i0+3 and W rows r0 .. r0+3: 16 accumulators, 8 loads per 16 multiply-adds.
inline void skinny_block4x4(const float* W, const float* X, int64_t K, float* Y, int64_t ldy, int64_t r0, int64_t i0) {
  const float *w0 = W + r0 * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
  const float *x0 = X + i0 * K, *x1 = x0 + K, *x2 = x1 + K, *x3 = x2 + K;
  float a00 = 0, a01 = 0, a02 = 0, a03 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0;
  float a20 = 0, a21 = 0, a22 = 0, a23 = 0, a30 = 0, a31 = 0, a32 = 0, a33 = 0;
#pragma omp simd reduction(+ : a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, a30, a31, a32, a33)
  for (int64_t k = 0; k < K; ++k) {
    const float v0 = w0[k], v1 = w1[k], v2 = w2[k], v3 = w3[k];
    const float u0 = x0[k], u1 = x1[k], u2 = x2[k], u3 = x3[k];
    a00 += u0 * v0, a01 += u0 * v1, a02 += u0 * v2, a03 += u0 * v3;
    a10 += u1 * v0, a11 += u1 * v1, a12 += u1 * v2, a13 += u1 * v3;
    a20 += u2 * v0, a21 += u2 * v1, a22 += u2 * v2, a23 += u2 * v3;
    a30 += u3 * v0, a31 += u3 * v1, a32 += u3 * v2, a33 += u3 * v3;
  }
  float* y = Y + i0 * ldy + r0;
  y[0] = a00, y[1] = a01, y[2] = a02, y[3] = a03;
  y += ldy;
  y[0] = a10, y[1] = a11, y[2] = a12, y[3] = a13;
  y += ldy;
  y[0] = a20, y[1] = a21, y[2] = a22, y[3] = a23;
  y += ldy;
  y[0] = a30, y[1] = a31, y[2] = a32, y[3] = a33;
}

// y[i][r] for one W row r and X rows i0 .. n-1 (at most a few), one accumulator each.
inline void skinny_row(const float* W, const float* X, int64_t K, float* Y, int64_t ldy, int64_t r, int64_t i0,
                       int64_t n) {
  const float* wr = W + r * K;
  for (int64_t i = i0; i < n; ++i) {
    const float* xi = X + i * K;
    float a = 0.0f;
#pragma omp simd reduction(+ : a)
    for (int64_t k = 0; k < K; ++k) a += wr[k] * xi[k];
    Y[i * ldy + r] = a;
  }
}

}  // namespace

void gemm_skinny(int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y, int64_t ldy) {
  if (n == 0 || N == 0) return;
  const int threads = N * K >= (int64_t(1) << 16) ? num_threads() : 1;
  const int64_t n4 = n / 4 * 4;
  if (n4 == 0) {
    // Fewer than four X rows: one W row at a time (one sequential stream from memory; blocking several W rows
    // measured 2x slower at n = 1 on the development machine).
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < N; ++r) skinny_row(W, X, K, Y, ldy, r, 0, n);
    return;
  }
  // Four X rows by four W rows per block (16 accumulators): compute-bound rather than load-bound at batch 16.
  const int64_t blocks = (N + 3) / 4;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * 4;
    if (r0 + 4 <= N) {
      for (int64_t i = 0; i < n4; i += 4) skinny_block4x4(W, X, K, Y, ldy, r0, i);
      for (int64_t r = r0; r < r0 + 4; ++r) skinny_row(W, X, K, Y, ldy, r, n4, n);
    } else {
      for (int64_t r = r0; r < N; ++r) skinny_row(W, X, K, Y, ldy, r, 0, n);
    }
  }
}

}  // namespace myriad::cpu
