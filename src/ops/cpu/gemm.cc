// GEMM through the library ops/gemm_backend.h chooses (oneDNN or OpenBLAS), and myriad's own few-row kernels
// (gemm_skinny*) where a library would spend its time packing the large operand.

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
// NOTE: GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (_mm512_undefined_ps, inside the
// masked loads and lane shuffles), which -Wuninitialized reports wherever they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/threads.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/simd_vec.h"
#include "ops/gemm_backend.h"

namespace myriad::cpu {

namespace {

// f(std::integral_constant<int, r>) for r in 1 .. 8: a block template instantiated per row count.
template <class F>
inline void with_rows(int64_t r, F&& f) {
  switch (r) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

}  // namespace

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
          int64_t stride_c) {
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // BLAS may reject K = 0 leading dimensions; the product is empty: C = beta * C
    for (int64_t b = 0; b < batch; ++b) {
      float* c = C + b * stride_c;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  const ops::GemmLibrary library = ops::gemm_library_for(ta, tb, M, N, K);
  for (int64_t b = 0; b < batch; ++b)
    ops::gemm_on(library, ta, tb, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb, beta, C + b * stride_c,
                 ldc);
}

namespace {

#if defined(__AVX2__) && defined(__FMA__)
// [sum(a), sum(b), sum(c), sum(d)]: three horizontal adds and one cross-half add for four dot products, where
// reducing each accumulator alone costs about five instructions apiece.
inline __m128 sum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// Y rows i0 .. i0+R-1 (R <= 4), W rows r0 .. r0+3, with AVX2 intrinsics, as two passes over pairs of W rows: at
// most 8 accumulators and 2 + R loads per 2R multiply-adds, all within the 16 registers (the generic 4 x 4 block
// spills 16 accumulators on AVX2), and the sums reduced four at a time. At K of a few hundred (MoE experts in the
// latent width) the reductions were ~40% of the generic block's time.
template <int R>
inline void skinny_block(const float* W, const float* X, int64_t K, float* Y, int64_t ldy, int64_t r0, int64_t i0) {
  const int64_t K8 = K / 8 * 8;
  for (int64_t r = r0; r < r0 + 4; r += 2) {
    const float *w0 = W + r * K, *w1 = w0 + K;
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) a[i][0] = a[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K8; k += 8) {
      __m256 v0 = _mm256_loadu_ps(w0 + k), v1 = _mm256_loadu_ps(w1 + k);
      // Keep the two W vectors in registers: left to itself GCC folds their loads into every multiply-add
      // (12 loads per 8 multiply-adds instead of 6), and the load ports, not the FMA units, set the pace.
      __asm__("" : "+x"(v0), "+x"(v1));
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const __m256 u = _mm256_loadu_ps(X + (i0 + i) * K + k);
        a[i][0] = _mm256_fmadd_ps(u, v0, a[i][0]), a[i][1] = _mm256_fmadd_ps(u, v1, a[i][1]);
      }
    }
#pragma GCC unroll 4
    for (int i = R; i < 4; ++i) a[i][0] = a[i][1] = _mm256_setzero_ps();
    alignas(16) float s[8];
    _mm_store_ps(s, sum4(a[0][0], a[0][1], a[1][0], a[1][1]));
    _mm_store_ps(s + 4, sum4(a[2][0], a[2][1], a[3][0], a[3][1]));
    for (int64_t k = K8; k < K; ++k)  // the last K % 8 terms
      for (int i = 0; i < R; ++i) {
        const float xk = X[(i0 + i) * K + k];
        s[2 * i] += xk * w0[k], s[2 * i + 1] += xk * w1[k];
      }
    for (int i = 0; i < R; ++i) {
      Y[(i0 + i) * ldy + r] = s[2 * i];
      Y[(i0 + i) * ldy + r + 1] = s[2 * i + 1];
    }
  }
}

inline void skinny_block4x4(const float* W, const float* X, int64_t K, float* Y, int64_t ldy, int64_t r0, int64_t i0) {
  skinny_block<4>(W, X, K, Y, ldy, r0, i0);
}

// The rows past the last block of four, against W rows r0 .. r0+3.
inline void skinny_rest(const float* W, const float* X, int64_t K, float* Y, int64_t ldy, int64_t r0, int64_t i0,
                        int64_t n) {
  switch (n - i0) {
    case 1:
      return skinny_block<1>(W, X, K, Y, ldy, r0, i0);
    case 2:
      return skinny_block<2>(W, X, K, Y, ldy, r0, i0);
    case 3:
      return skinny_block<3>(W, X, K, Y, ldy, r0, i0);
    default:
      return;
  }
}
#else
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
#endif

#if defined(__AVX2__) && defined(__FMA__)
// y[i][r] for one W row r and X rows i0 .. n-1 (at most a few). Four accumulators per dot product: with one, each
// multiply-add waits for the previous (4 cycles on Zen 3), which capped a thread at ~24 GB/s of W, below what
// memory delivers; batch-1 decode is this loop over every weight row.
inline void skinny_row(const float* W, const float* X, int64_t K, float* Y, int64_t ldy, int64_t r, int64_t i0,
                       int64_t n) {
  const float* wr = W + r * K;
  const int64_t K32 = K / 32 * 32;
  for (int64_t i = i0; i < n; ++i) {
    const float* xi = X + i * K;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t k = 0; k < K32; k += 32) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k), _mm256_loadu_ps(xi + k), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k + 8), _mm256_loadu_ps(xi + k + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k + 16), _mm256_loadu_ps(xi + k + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k + 24), _mm256_loadu_ps(xi + k + 24), a3);
    }
    alignas(16) float s[4];
    _mm_store_ps(s, sum4(a0, a1, a2, a3));
    float a = (s[0] + s[1]) + (s[2] + s[3]);
    for (int64_t k = K32; k < K; ++k) a += wr[k] * xi[k];
    Y[i * ldy + r] = a;
  }
}
#else
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
#endif

#if !(defined(__AVX2__) && defined(__FMA__))
inline void skinny_rest(const float* W, const float* X, int64_t K, float* Y, int64_t ldy, int64_t r0, int64_t i0,
                        int64_t n) {
  for (int64_t r = r0; r < r0 + 4; ++r) skinny_row(W, X, K, Y, ldy, r, i0, n);
}
#endif

#if defined(__AVX512F__)
// With AVX-512 (32 registers): blocks of up to 8 X rows by 2 W rows, 16 accumulators, 10 loads per 16
// multiply-adds. Measured on the 2-core development machine (Zen 5, one thread, 16 x 510 x 512): 184 GFLOP/s,
// against 75 for the AVX2 4 x 4 block below and 108 for a 4 x 4 block of 512-bit registers (the X rows, not
// the W rows, are what a block must reuse).
//
// sum16: the sums of 16 vectors at once; float 4m + e of the result is the sum of a[4e + m]. Four
// shuffle-and-add stages instead of a horizontal reduction per vector (at K = 160, the MLA page scores, those
// cost as much as the multiply-adds).
inline __m512 sum16(const __m512 (&a)[16]) {
  __m512 s[8], t[4], w[2];
  for (int p = 0; p < 8; ++p)  // 256-bit halves added: s[p] = [a(2p) partials | a(2p+1) partials]
    s[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xEE));
  for (int p = 0; p < 4; ++p)  // 128-bit lane m of t[p]: four partial sums of a(4p + m)
    t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], 0x88),
                         _mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], 0xDD));
  for (int p = 0; p < 2; ++p)
    w[p] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * p], t[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(t[2 * p], t[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Y rows i0 .. i0+RX-1, columns r0 and r0+1 (only r0 when !two); the K % 16 tail through masked loads.
template <int RX>
inline void skinny512_block(const float* W, const float* X, int64_t K, float* Y, int64_t ldy, int64_t r0, bool two,
                            int64_t i0) {
  const float* w0 = W + r0 * K;
  const float* w1 = two ? w0 + K : w0;
  __m512 a[RX][2];
  for (int x = 0; x < RX; ++x) a[x][0] = a[x][1] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512 v0 = _mm512_loadu_ps(w0 + k), v1 = _mm512_loadu_ps(w1 + k);
    for (int x = 0; x < RX; ++x) {
      __m512 u = _mm512_loadu_ps(X + (i0 + x) * K + k);
      __asm__("" : "+v"(u));  // one load for both products (GCC would fold a load into each: 16 loads, not 10)
      a[x][0] = _mm512_fmadd_ps(u, v0, a[x][0]);
      a[x][1] = _mm512_fmadd_ps(u, v1, a[x][1]);
    }
  }
  if (k < K) {
    const __mmask16 m = __mmask16((1u << (K - k)) - 1);
    const __m512 v0 = _mm512_maskz_loadu_ps(m, w0 + k), v1 = _mm512_maskz_loadu_ps(m, w1 + k);
    for (int x = 0; x < RX; ++x) {
      const __m512 u = _mm512_maskz_loadu_ps(m, X + (i0 + x) * K + k);
      a[x][0] = _mm512_fmadd_ps(u, v0, a[x][0]);
      a[x][1] = _mm512_fmadd_ps(u, v1, a[x][1]);
    }
  }
  if constexpr (RX == 8) {
    // Vector 2x + j is a[x][j]: its sum lands at float 4 (2 (x % 2) + j) + x / 2.
    // Copied out, not cast: taking the accumulators' address keeps them in memory through the loop (half speed).
    __m512 flat[16];
    for (int x = 0; x < 8; ++x) flat[2 * x] = a[x][0], flat[2 * x + 1] = a[x][1];
    alignas(64) float z[16];
    _mm512_store_ps(z, sum16(flat));
    for (int x = 0; x < 8; ++x) {
      Y[(i0 + x) * ldy + r0] = z[4 * (2 * (x % 2)) + x / 2];
      if (two) Y[(i0 + x) * ldy + r0 + 1] = z[4 * (2 * (x % 2) + 1) + x / 2];
    }
  } else {
    for (int x = 0; x < RX; ++x) {
      Y[(i0 + x) * ldy + r0] = _mm512_reduce_add_ps(a[x][0]);
      if (two) Y[(i0 + x) * ldy + r0 + 1] = _mm512_reduce_add_ps(a[x][1]);
    }
  }
}

void skinny512(int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y, int64_t ldy, int threads) {
  const int64_t pairs = (N + 1) / 2;
  parallel_region(threads, [&](int t, int nt) {
    for (int64_t p = part_begin(pairs, t, nt), pe = part_begin(pairs, t + 1, nt); p < pe; ++p) {
      const int64_t r0 = 2 * p;
      const bool two = r0 + 1 < N;
      // The pair after next: two rows are too short a stream for the hardware prefetcher when W comes from
      // memory (many small MoE experts). NOTE: into all cache levels (T0), not non-temporal: on a Xeon (family 6
      // model 167) prefetchnta halved the stream at 4-16 rows (8 GB/s against 17 with T0 and 15 with none, rows
      // of [256, 512] experts from DRAM), while T0 keeps what the prefetch gains over none.
      if (r0 + 6 <= N)
        for (const float *q = W + (r0 + 4) * K, *e = q + 2 * K; q < e; q += 16) __builtin_prefetch(q, 0, 3);
      for (int64_t i0 = 0; i0 < n; i0 += 8) {
        with_rows(std::min<int64_t>(8, n - i0),
                  [&](auto R) { skinny512_block<R.value>(W, X, K, Y, ldy, r0, two, i0); });
      }
    }
  });
}
#endif

}  // namespace

void gemm_skinny(int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y, int64_t ldy) {
  if (n == 0 || N == 0) return;
  // Split by the whole product: a batch of 16 rows over a small weight (a router) is worth two threads.
  const int threads = n * N * K >= (int64_t(1) << 16) ? num_threads() : 1;
#if defined(__AVX512F__)
  if (n >= 4) return skinny512(n, N, K, X, W, Y, ldy, threads);
#endif
  const int64_t n4 = n / 4 * 4;
  if (n4 == 0) {
    // Fewer than four X rows: one W row at a time (one sequential stream from memory; blocking several W rows
    // measured 2x slower at n = 1 on the development machine).
    parallel_region(threads, [&](int t, int nt) {
      for (int64_t r = part_begin(N, t, nt), e = part_begin(N, t + 1, nt); r < e; ++r)
        skinny_row(W, X, K, Y, ldy, r, 0, n);
    });
    return;
  }
  // Four X rows by four W rows per block (16 accumulators): compute-bound rather than load-bound at batch 16.
  const int64_t blocks = (N + 3) / 4;
  parallel_region(threads, [&](int t, int nt) {
    for (int64_t b = part_begin(blocks, t, nt), be = part_begin(blocks, t + 1, nt); b < be; ++b) {
      const int64_t r0 = b * 4;
      // Start loading the block after next: the rows of one block are only 4 x K floats, too short a stream for
      // the hardware prefetcher to get ahead when W comes from memory (many small MoE experts).
      if (r0 + 12 <= N)
        for (const float *p = W + (r0 + 8) * K, *e = p + 4 * K; p < e; p += 16)
          __builtin_prefetch(p, 0, 3);  // T0: above
      if (r0 + 4 <= N) {
        for (int64_t i = 0; i < n4; i += 4) skinny_block4x4(W, X, K, Y, ldy, r0, i);
        skinny_rest(W, X, K, Y, ldy, r0, n4, n);
      } else {
        for (int64_t r = r0; r < N; ++r) skinny_row(W, X, K, Y, ldy, r, 0, n);
      }
    }
  });
}

namespace {

// A tile is 16 columns: two F8 (simd_vec.h; wider generic vectors are lowered through memory on AVX2).
constexpr int64_t kTile = 16;

// Pins two vectors in registers: GCC otherwise folds a vector's load into each multiply-add that uses it, and a
// tile's four uses become four loads (the load ports then set the pace, not the FMA units).
inline void keep_in_registers(F8& a, F8& b) {
#if defined(__AVX__)
  __asm__("" : "+x"(a), "+x"(b));
#endif
}

// Y rows i0 .. i0+3, columns [c0, c0 + 16): (accumulate ? Y : 0) + X W, each 16-float piece of W loaded once
// per k for the four rows.
inline void skinny_nn_tile4(const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy, int64_t K,
                            int64_t i0, int64_t c0, bool accumulate, const float* next) {
  const float *x0 = X + i0 * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
  float *y0 = Y + i0 * ldy + c0, *y1 = y0 + ldy, *y2 = y1 + ldy, *y3 = y2 + ldy;
  F8 a0{}, b0{}, a1{}, b1{}, a2{}, b2{}, a3{}, b3{};
  if (accumulate) {
    a0 = load_v<F8>(y0), b0 = load_v<F8>(y0 + 8), a1 = load_v<F8>(y1), b1 = load_v<F8>(y1 + 8);
    a2 = load_v<F8>(y2), b2 = load_v<F8>(y2 + 8), a3 = load_v<F8>(y3), b3 = load_v<F8>(y3 + 8);
  }
  const float* w = W + c0;
  for (int64_t k = 0; k < K; ++k, w += ldw) {
    if (next) __builtin_prefetch(next + k * ldw, 0, 1);
    F8 wl = load_v<F8>(w), wh = load_v<F8>(w + 8);
    keep_in_registers(wl, wh);
    a0 += x0[k] * wl, b0 += x0[k] * wh, a1 += x1[k] * wl, b1 += x1[k] * wh;
    a2 += x2[k] * wl, b2 += x2[k] * wh, a3 += x3[k] * wl, b3 += x3[k] * wh;
  }
  store_v(y0, a0), store_v(y0 + 8, b0), store_v(y1, a1), store_v(y1 + 8, b1);
  store_v(y2, a2), store_v(y2 + 8, b2), store_v(y3, a3), store_v(y3 + 8, b3);
}

inline void skinny_nn_tile1(const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy, int64_t K,
                            int64_t i, int64_t c0, bool accumulate, const float* next) {
  const float* x = X + i * ldx;
  float* y = Y + i * ldy + c0;
  // Two accumulator pairs (even and odd k): one pair alone is a chain of dependent FMAs, latency-bound (a lone query
  // row times a per-head matrix in MLA decode is this case).
  F8 a{}, b{}, a1{}, b1{};
  if (accumulate) a = load_v<F8>(y), b = load_v<F8>(y + 8);
  const float* w = W + c0;
  int64_t k = 0;
  for (; k + 2 <= K; k += 2, w += 2 * ldw) {
    if (next) __builtin_prefetch(next + k * ldw, 0, 1), __builtin_prefetch(next + (k + 1) * ldw, 0, 1);
    a += x[k] * load_v<F8>(w), b += x[k] * load_v<F8>(w + 8);
    a1 += x[k + 1] * load_v<F8>(w + ldw), b1 += x[k + 1] * load_v<F8>(w + ldw + 8);
  }
  for (; k < K; ++k, w += ldw) {
    if (next) __builtin_prefetch(next + k * ldw, 0, 1);
    a += x[k] * load_v<F8>(w), b += x[k] * load_v<F8>(w + 8);
  }
  store_v(y, a + a1), store_v(y + 8, b + b1);
}

// D rows r0 .. r0+3, columns [c0, c0 + 16) += sum_i A[i, r] B[i, c]: each 16-float piece of B is loaded once for
// the four rows of D, which is read and written once.
inline void rank_update_tile4(const float* A, int64_t lda, const float* B, int64_t ldb, float* D, int64_t ldd,
                              int64_t n, int64_t r0, int64_t c0) {
  float *d0 = D + r0 * ldd + c0, *d1 = d0 + ldd, *d2 = d1 + ldd, *d3 = d2 + ldd;
  F8 a0 = load_v<F8>(d0), b0 = load_v<F8>(d0 + 8), a1 = load_v<F8>(d1), b1 = load_v<F8>(d1 + 8);
  F8 a2 = load_v<F8>(d2), b2 = load_v<F8>(d2 + 8), a3 = load_v<F8>(d3), b3 = load_v<F8>(d3 + 8);
  const float* ar = A + r0;
  const float* br = B + c0;
  for (int64_t i = 0; i < n; ++i, ar += lda, br += ldb) {
    F8 bl = load_v<F8>(br), bh = load_v<F8>(br + 8);
    keep_in_registers(bl, bh);
    a0 += ar[0] * bl, b0 += ar[0] * bh, a1 += ar[1] * bl, b1 += ar[1] * bh;
    a2 += ar[2] * bl, b2 += ar[2] * bh, a3 += ar[3] * bl, b3 += ar[3] * bh;
  }
  store_v(d0, a0), store_v(d0 + 8, b0), store_v(d1, a1), store_v(d1 + 8, b1);
  store_v(d2, a2), store_v(d2 + 8, b2), store_v(d3, a3), store_v(d3 + 8, b3);
}

inline void rank_update_tile1(const float* A, int64_t lda, const float* B, int64_t ldb, float* D, int64_t ldd,
                              int64_t n, int64_t r, int64_t c0) {
  float* d = D + r * ldd + c0;
  F8 a = load_v<F8>(d), b = load_v<F8>(d + 8);
  for (int64_t i = 0; i < n; ++i) {
    const float s = A[i * lda + r];
    a += s * load_v<F8>(B + i * ldb + c0), b += s * load_v<F8>(B + i * ldb + c0 + 8);
  }
  store_v(d, a), store_v(d + 8, b);
}

}  // namespace

void gemm_skinny_nn(int64_t n, int64_t N, int64_t K, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y,
                    int64_t ldy, bool accumulate) {
  const int64_t N16 = N / kTile * kTile, n4 = n / 4 * 4;
  // A tile walks down 16 columns of W, one cache line per row at a stride of a whole row, which the hardware
  // prefetcher follows poorly when W comes from memory; the first pass over a tile loads the next tile's lines.
  for (int64_t c0 = 0; c0 < N16; c0 += kTile) {
    const float* next = c0 + kTile < N16 ? W + c0 + kTile : nullptr;
    for (int64_t i = 0; i < n4; i += 4, next = nullptr)
      skinny_nn_tile4(X, ldx, W, ldw, Y, ldy, K, i, c0, accumulate, next);
    for (int64_t i = n4; i < n; ++i, next = nullptr)
      skinny_nn_tile1(X, ldx, W, ldw, Y, ldy, K, i, c0, accumulate, next);
  }
  for (int64_t i = 0; i < n; ++i)  // columns past the last whole tile
    for (int64_t c = N16; c < N; ++c) {
      float a = accumulate ? Y[i * ldy + c] : 0.0f;
      for (int64_t k = 0; k < K; ++k) a += X[i * ldx + k] * W[k * ldw + c];
      Y[i * ldy + c] = a;
    }
}

void rank_update(int64_t M, int64_t N, int64_t n, const float* A, int64_t lda, const float* B, int64_t ldb, float* D,
                 int64_t ldd) {
  const int64_t N16 = N / kTile * kTile, M4 = M / 4 * 4;
  for (int64_t r = 0; r < M4; r += 4)
    for (int64_t c0 = 0; c0 < N16; c0 += kTile) {
      if (r + 8 <= M)  // the same tile of the next four rows, for writing (rows are short streams; see gemm_skinny)
        for (int64_t j = 4; j < 8; ++j) __builtin_prefetch(D + (r + j) * ldd + c0, 1, 1);
      rank_update_tile4(A, lda, B, ldb, D, ldd, n, r, c0);
    }
  for (int64_t r = M4; r < M; ++r)
    for (int64_t c0 = 0; c0 < N16; c0 += kTile) rank_update_tile1(A, lda, B, ldb, D, ldd, n, r, c0);
  for (int64_t r = 0; r < M; ++r)  // columns past the last whole tile
    for (int64_t c = N16; c < N; ++c) {
      float a = D[r * ldd + c];
      for (int64_t i = 0; i < n; ++i) a += A[i * lda + r] * B[i * ldb + c];
      D[r * ldd + c] = a;
    }
}

// ---- bf16 operands ----

namespace {

inline float widen(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
// Y rows i0 .. i0+RX-1 x W rows r0, r0+1 (r0 only when !two): 2 W loads and RX X loads per 2 RX vdpbf16ps, each
// 32 products; the K % 32 tail through masked (zeroed) loads.
template <int RX>
inline void bf16_block(const uint16_t* X, int64_t ldx, const uint16_t* W, int64_t ldw, int64_t K, float* Y, int64_t ldy,
                       int64_t r0, bool two, int64_t i0) {
  const uint16_t* w0 = W + r0 * ldw;
  const uint16_t* w1 = two ? w0 + ldw : w0;
  __m512 a[RX][2];
  for (int x = 0; x < RX; ++x) a[x][0] = a[x][1] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    const __m512bh v0 = (__m512bh)_mm512_loadu_si512(w0 + k), v1 = (__m512bh)_mm512_loadu_si512(w1 + k);
    for (int x = 0; x < RX; ++x) {
      __m512i u = _mm512_loadu_si512(X + (i0 + x) * ldx + k);
      __asm__("" : "+v"(u));  // one load for both products
      a[x][0] = _mm512_dpbf16_ps(a[x][0], (__m512bh)u, v0);
      a[x][1] = _mm512_dpbf16_ps(a[x][1], (__m512bh)u, v1);
    }
  }
  if (k < K) {
    const __mmask32 m = __mmask32((1u << (K - k)) - 1);
    const __m512bh v0 = (__m512bh)_mm512_maskz_loadu_epi16(m, w0 + k);
    const __m512bh v1 = (__m512bh)_mm512_maskz_loadu_epi16(m, w1 + k);
    for (int x = 0; x < RX; ++x) {
      const __m512i u = _mm512_maskz_loadu_epi16(m, X + (i0 + x) * ldx + k);
      a[x][0] = _mm512_dpbf16_ps(a[x][0], (__m512bh)u, v0);
      a[x][1] = _mm512_dpbf16_ps(a[x][1], (__m512bh)u, v1);
    }
  }
  for (int x = 0; x < RX; ++x) {
    Y[(i0 + x) * ldy + r0] = _mm512_reduce_add_ps(a[x][0]);
    if (two) Y[(i0 + x) * ldy + r0 + 1] = _mm512_reduce_add_ps(a[x][1]);
  }
}
#endif

}  // namespace

bool bf16_dot_native() {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  return true;
#else
  return false;
#endif
}

void gemm_skinny_bf16(int64_t n, int64_t N, int64_t K, const uint16_t* X, int64_t ldx, const uint16_t* W, int64_t ldw,
                      float* Y, int64_t ldy) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  for (int64_t r0 = 0; r0 < N; r0 += 2) {
    const bool two = r0 + 1 < N;
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
      with_rows(std::min<int64_t>(8, n - i0),
                [&](auto R) { bf16_block<R.value>(X, ldx, W, ldw, K, Y, ldy, r0, two, i0); });
    }
  }
#else
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < N; ++r) {
      float a = 0.0f;
      for (int64_t k = 0; k < K; ++k) a += widen(X[i * ldx + k]) * widen(W[r * ldw + k]);
      Y[i * ldy + r] = a;
    }
#endif
}

void bf16_to_f32_rows(float* dst, int64_t ldd, const uint16_t* src, int64_t lds, int64_t n, int64_t K) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* s = src + i * lds;
    float* d = dst + i * ldd;
    int64_t k = 0;
#if defined(__AVX512F__)
    for (; k + 16 <= K; k += 16)
      _mm512_storeu_ps(d + k,
                       _mm512_castsi512_ps(_mm512_slli_epi32(
                           _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k))), 16)));
#endif
    for (; k < K; ++k) d[k] = widen(s[k]);
  }
}

void f32_to_bf16_rows(uint16_t* dst, int64_t ldd, const float* src, int64_t lds, int64_t n, int64_t K) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < K; ++k) dst[i * ldd + k] = f32_to_bf16(src[i * lds + k]);
    for (int64_t k = K; k < ldd; ++k) dst[i * ldd + k] = 0;
  }
}

}  // namespace myriad::cpu
