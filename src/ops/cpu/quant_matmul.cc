// The CPU kernels of quant_matmul: y[n, rows] = x[n, cols] . W^T with W block-quantized (ops/block_quant.h),
// without dequantizing W whole.
//
// Legend: N rows of x (tokens), R rows of W (outputs), Cols inputs, G = Cols / 32 groups per row.
//
// Three strategies:
//  - row-strip integer kernels (N < quant_gemm_rows(); decode is memory-bound): x is quantized per row and group of 32
//  to int8 with
//    an f32 scale dx (q8_0-style activations); each group's dot product is exact in int32 and is scaled by dw * dx
//    in f32 (for N = 1 the two scales are multiplied once per strip: one scale per group). W is streamed once per
//    call in strips of kStripRows rows, each strip prefetched while the previous one is computed; within a strip,
//    tiles of R W rows x C x rows share every load of W and x.
//      scalar      portable C++, the oracle of the SIMD kernels (same integer sums; only the f32 order differs)
//      avx2        one group per step. q8: |w| (u8) x sign(x, w) (s8) with maddubs + madd. 4-bit: the codes as u8
//                  (q4: the code = q + 8; mxfp4: 2 * e2m1 + 12 through a 16-byte table) x s8 x
//      avx512vnni  dpbusd on u8 (w + bias) x s8 x, bias 128 / 8 / 12 for q8 / q4 / mxfp4 (q8: w ^ 0x80); one
//                  64-byte load of W per step: q8 two groups, 4-bit four (its low nibbles and its high nibbles,
//                  each one AND away from u8, meet two 64-byte vectors of x; both dpbusd land in one accumulator
//                  whose lanes each hold 8 weights of one group, so one convert + FMA serves 128 weights)
//    The bias is removed exactly: each group's int32 accumulator starts at -bias * sum(x) of its lanes, computed
//    once per x row (XQuant::init) and shared by every W row. x is stored permuted to match how the 4-bit codes
//    unpack (low nibbles = even columns first), so no nibble is ever interleaved.
//  - packed int8 GEMM (N >= quant_gemm_rows() where the build has AVX512-VNNI; compute-bound): W repacked so that
//    one vpdpbusd serves 16 W rows, x quantized as above (ops/cpu/quant_gemm_vnni.cc).
//  - dequant + sgemm (N >= quant_gemm_rows() elsewhere): panels of ~8 MiB of W rows are expanded to f32 (in
//    parallel) and multiplied with the GEMM library (threaded); x is used exactly.
// NOTE (accuracy of the integer path): x_g is replaced by dx_g q_g with |x_g - dx_g q_g| <= dx_g / 2,
// dx_g = max|x_g| / 127, so each output moves by at most sum_g (dx_g / 2) sum_{i in g} |W_i| (about 0.4% of
// |x| |W| per group in the worst case, far less on average since the errors are independent).
//
// Threads: OpenMP over strips (integer) or panel rows (sgemm path), only when N x R x Cols is large enough to pay
// for a fork/join, and never from inside another parallel region.
// Why four groups per 4-bit VNNI step: decode streams W from DRAM, and a 4-bit byte carries two weights to unpack,
// convert and scale; with two groups per step the unpacking, not the memory, bounded the kernel on one core. The
// measured rates (per core from the cache and from DRAM, against q8 and f32) are in docs/performance.md.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/threads.h"
#include "ops/block_quant.h"
#include "ops/cpu/cpu_kernels.h"

#if defined(__AVX2__) || defined(__F16C__)
// NOTE: GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (_mm512_undefined_ps), which
// -Wmaybe-uninitialized reports wherever such an intrinsic is inlined; silenced for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif
#include "ops/cpu/quant_int8.h"

namespace myriad {

namespace {

constexpr int64_t kStripRows = 16;                 // W rows per unit of work of the integer path
constexpr int64_t kPanelBytes = int64_t(8) << 20;  // f32 W panel of the sgemm path
// N x R x Cols multiply-adds below which one thread does the whole product. Decode-sized products from 2^14 up
// are split: a fork/join of spinning OpenMP threads costs ~1-2 us, and one thread alone streams a cold weight at
// about half the bandwidth of two (q8 batch-1 decode: 46% -> 55% of the triad going from 2^18 to 2^14).
constexpr int64_t kParallelWork = int64_t(1) << 14;

using namespace cpu::quant;  // NOLINT: the integer path's shared pieces

// One tile: W rows [r, r + R) x x rows [t, t + C). FOLD (C = 1): dw already holds dw * dx of x row t.
struct TileArgs {
  const uint8_t* codes;  // W row r's codes; row stride code_stride bytes
  int64_t code_stride;
  const float* dw;  // scales of W row r (stride ws), padded with zeros to Gp + 16
  int64_t ws;
  const int8_t* xq;     // x row t's quantized values (stride xq.qs)
  const int32_t* init;  // (stride xq.is)
  const float* dx;      // (stride xq.ds)
  const XQuant* x;
  int64_t G;
  float* y;  // y[t, r]; stride ldy between x rows
  int64_t ldy;
};

// ---- scalar ----
// NOTE: GCC 12.2 at -O2/-O3 with AVX512-VNNI (-march=native here) vectorises a signed char x signed char
// dot-product loop into vpdpbusd, which multiplies *unsigned* by signed bytes: wrong sums (and an aligned load of an
// unaligned address). The scalar kernel, the oracle and the portable fallback, is therefore never auto-vectorised.
#if defined(__GNUC__) && !defined(__clang__)
#define MYRIAD_QUANT_NO_VECTORIZE __attribute__((optimize("no-tree-vectorize")))
#else
#define MYRIAD_QUANT_NO_VECTORIZE
#endif

template <QuantType T>
inline int w_value(const uint8_t* row, int64_t col) {
  if constexpr (T == QuantType::kQ8) {
    return int8_t(row[col]);
  } else {
    const uint8_t b = row[col / 2];
    return lut4<T>()[(col & 1) ? (b >> 4) : (b & 0xf)];
  }
}

template <QuantType T, int R, int C, bool FOLD>
struct ScalarTile {
  MYRIAD_QUANT_NO_VECTORIZE static void run(const TileArgs& a) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = a.codes + r * a.code_stride;
      for (int c = 0; c < C; ++c) {
        const int8_t* xr = a.xq + c * a.x->qs;
        float acc = 0;
        for (int64_t g = 0; g < a.G; ++g) {
          int32_t s = 0;
          for (int64_t i = g * kQuantGroup; i < (g + 1) * kQuantGroup; ++i) s += w_value<T>(row, i) * int32_t(xr[i]);
          acc += float(s) * (a.dw[r * a.ws + g] * a.dx[c * a.x->ds + g]);
        }
        a.y[c * a.ldy + r] = acc;
      }
    }
  }
};

#if MYRIAD_QUANT_AVX2
inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Group g of a W row as 32 bytes in x's stored order: q8 signed; 4-bit unsigned (value + kBias).
template <QuantType T>
inline __m256i avx2_load_w(const uint8_t* row, int64_t g) {
  if constexpr (T == QuantType::kQ8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + g * kQuantGroup));
  } else {
    const __m256i b =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + g * (kQuantGroup / 2))));
    const __m256i u = _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
    if constexpr (T == QuantType::kQ4) return u;
    return _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4ULut))), u);
  }
}

template <QuantType T, int R, int C, bool FOLD>
struct Avx2Tile {
  static void run(const TileArgs& a) {
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < a.G; ++g) {
      __m256i wv[R], aw[R];
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(a.codes + (r + kStripRows) * a.code_stride + g * kCodeBytes<T>),
                     _MM_HINT_T0);
        wv[r] = avx2_load_w<T>(a.codes + r * a.code_stride, g);
        if constexpr (T == QuantType::kQ8) aw[r] = _mm256_abs_epi8(wv[r]);
      }
      for (int c = 0; c < C; ++c) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + c * a.x->qs + g * kQuantGroup));
        for (int r = 0; r < R; ++r) {
          __m256i p;
          if constexpr (T == QuantType::kQ8) {
            // |w| x (x with w's sign): u8 x s8 pairs, at most 2 * 127 * 127 < 2^15: maddubs never saturates.
            p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, wv[r])), ones);
          } else {
            // (w + bias) x x, at most 2 * 24 * 127 < 2^15; the accumulator starts at -bias * sum x.
            p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wv[r], xv), ones),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.init + c * a.x->is + g * 8)));
          }
          const __m256 s = FOLD ? _mm256_broadcast_ss(a.dw + r * a.ws + g)
                                : _mm256_set1_ps(a.dw[r * a.ws + g] * a.dx[c * a.x->ds + g]);
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[r][c]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) a.y[c * a.ldy + r] = hsum256(acc[r][c]);
  }
};
#endif  // MYRIAD_QUANT_AVX2

#if MYRIAD_QUANT_AVX512VNNI
// One step of a W row from group g (kVnniStepGroups<T> groups, fewer at the row's end: `left` groups, the rest read
// as zero bytes, harmless since x is zero there) as unsigned bytes (value + kBias) in x's stored order: q8 one
// vector; 4-bit two, the low nibbles and the high nibbles of the step's 64 code bytes.
template <QuantType T>
struct VnniW {
  __m512i lo, hi;  // hi: 4-bit only
};

template <QuantType T>
inline VnniW<T> vnni_load_w(const uint8_t* row, int64_t g, int64_t left) {
  constexpr int64_t kStep = kVnniStepGroups<T>;
  const uint8_t* p = row + g * kCodeBytes<T>;
  const __m512i b =
      left >= kStep ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(~0ull >> (64 - left * kCodeBytes<T>), p);
  if constexpr (T == QuantType::kQ8) {
    return {_mm512_xor_si512(b, _mm512_set1_epi8(char(0x80))), _mm512_setzero_si512()};
  } else {
    const __m512i m = _mm512_set1_epi8(0x0f);
    const __m512i lo = _mm512_and_si512(b, m), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), m);
    if constexpr (T == QuantType::kQ4) return {lo, hi};
    const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4ULut)));
    return {_mm512_shuffle_epi8(lut, lo), _mm512_shuffle_epi8(lut, hi)};
  }
}

// The 16 lanes' scales for the step's groups from p[0..kStep) (reads 16 floats: the buffers are padded).
template <QuantType T>
inline __m512 vnni_scales(const float* p) {
  const __m512i idx = T == QuantType::kQ8 ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                                          : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_ps(idx, _mm512_loadu_ps(p));
}

template <QuantType T, int R, int C, bool FOLD>
struct VnniTile {
  static constexpr int64_t kStep = kVnniStepGroups<T>;
  static constexpr int64_t kLanes = 16 / kStep;  // init lanes per group
  static void run(const TileArgs& a) {
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t g = 0; g < a.G; g += kStep) {
      VnniW<T> wv[R];
      __m512i xlo[C], xhi[C], iv[C];
      __m512 sw[R], sx[C];
      for (int r = 0; r < R; ++r) {
        // The same bytes of the next strip: DRAM requests in flight well ahead, across 4 KiB pages.
        _mm_prefetch(reinterpret_cast<const char*>(a.codes + (r + kStripRows) * a.code_stride + g * kCodeBytes<T>),
                     _MM_HINT_T0);
        wv[r] = vnni_load_w<T>(a.codes + r * a.code_stride, g, a.G - g);
        sw[r] = vnni_scales<T>(a.dw + r * a.ws + g);
      }
      for (int c = 0; c < C; ++c) {
        const int8_t* xs = a.xq + c * a.x->qs + g * kQuantGroup;
        xlo[c] = _mm512_loadu_si512(xs);
        if constexpr (T != QuantType::kQ8) xhi[c] = _mm512_loadu_si512(xs + 64);
        iv[c] = _mm512_loadu_si512(a.init + c * a.x->is + g * kLanes);
        if constexpr (!FOLD) sx[c] = vnni_scales<T>(a.dx + c * a.x->ds + g);
      }
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
          __m512i s = _mm512_dpbusd_epi32(iv[c], wv[r].lo, xlo[c]);  // exact sum of w x per group
          if constexpr (T != QuantType::kQ8) s = _mm512_dpbusd_epi32(s, wv[r].hi, xhi[c]);
          acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), FOLD ? sw[r] : _mm512_mul_ps(sw[r], sx[c]), acc[r][c]);
        }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) a.y[c * a.ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
};
#endif  // MYRIAD_QUANT_AVX512VNNI

template <template <QuantType, int, int, bool> class Tile, QuantType T, int R>
void run_tile(int64_t c, const TileArgs& a) {
  switch (c) {
    case 1:
      Tile<T, R, 1, false>::run(a);
      break;
    case 2:
      Tile<T, R, 2, false>::run(a);
      break;
    case 3:
      Tile<T, R, 3, false>::run(a);
      break;
    default:
      Tile<T, R, 4, false>::run(a);
      break;
  }
}

// The integer path for one kernel family and type, over one or more matrices of the same width that multiply the
// same x: x is quantized once, and one parallel region splits the strips of all of them (a decode step runs several
// products of one x, e.g. the KDA projections; each region costs a fork/join, each product a quantization of x).
template <Family F, template <QuantType, int, int, bool> class Tile, QuantType T>
void integer_matmul(std::span<const QuantMatrix* const> mats, const float* x, int64_t n, std::span<float* const> ys) {
  const int64_t cols = mats[0]->cols, G = cols / kQuantGroup;
  const XQuant& xq = quantize_x(x, n, cols, F, T, kBias<F, T>);
  const int64_t ws = xq.Gp + 16;  // scale buffer row stride (zero padding for 64-byte loads)
  const int64_t code_stride = T == QuantType::kQ8 ? cols : cols / 2;
  // Strips numbered across the matrices: matrix m holds strips [first[m], first[m + 1]).
  // (On the stack for the usual handful of matrices: the worker threads read it.)
  int64_t first_small[17];
  std::vector<int64_t> first_big(mats.size() >= 17 ? mats.size() + 1 : 0);
  int64_t* first = mats.size() >= 17 ? first_big.data() : first_small;
  first[0] = 0;
  int64_t work = 0;
  for (size_t m = 0; m < mats.size(); ++m) {
    first[m + 1] = first[m] + (mats[m]->rows + kStripRows - 1) / kStripRows;
    work += n * mats[m]->rows * cols;
  }
  const int64_t strips = first[mats.size()];
  const int nt = num_threads();
  const bool par = nt > 1 && strips > 1 && work >= kParallelWork && !omp_in_parallel();
  parallel_region(par ? nt : 1, [&](int part, int parts) {
    // Per-thread scale buffers, kept between calls; only their zero padding past G is rewritten here (the strips
    // overwrite the first G of each row).
    thread_local std::vector<float> dw, dwx;
    if (dw.size() < size_t(kStripRows * ws)) dw.resize(size_t(kStripRows * ws)), dwx.resize(size_t(kStripRows * ws));
    for (int64_t i = 0; i < kStripRows; ++i) {
      std::fill(dw.begin() + i * ws + G, dw.begin() + (i + 1) * ws, 0.0f);
      std::fill(dwx.begin() + i * ws + G, dwx.begin() + (i + 1) * ws, 0.0f);
    }
    const int64_t sb = part_begin(strips, part, parts), se = part_begin(strips, part + 1, parts);
    size_t m = size_t(std::upper_bound(first, first + mats.size() + 1, sb) - first) - 1;
    for (int64_t gs = sb; gs < se; ++gs) {
      while (gs >= first[m + 1]) ++m;
      const QuantMatrix& w = *mats[m];
      const int64_t rows = w.rows, s = gs - first[m];
      const uint8_t* codes = w.codes.data<uint8_t>();
      float* y = ys[m];
      const int64_t r0 = s * kStripRows, nr = std::min(kStripRows, rows - r0);
      // Decode (n = 1): dw * dx folded into one scale per group in the same pass.
      const bool fold_all = n == 1 && F != Family::kScalar;
      load_scales(w, r0, nr, fold_all ? dwx.data() : dw.data(), ws, fold_all ? xq.d.data() : nullptr);
      for (int64_t t = 0; t < n; t += 4) {
        const int64_t nc = std::min<int64_t>(4, n - t);
        TileArgs a{nullptr,
                   code_stride,
                   nullptr,
                   ws,
                   xq.q.data() + t * xq.qs,
                   xq.init.data() + t * xq.is,
                   xq.d.data() + t * xq.ds,
                   &xq,
                   G,
                   nullptr,
                   rows};
        auto at = [&](int64_t rr, const std::vector<float>& scales) {
          a.codes = codes + (r0 + rr) * code_stride;
          a.dw = scales.data() + rr * ws;
          a.y = y + t * rows + r0 + rr;
        };
        int64_t r = 0;
        if (nc == 1 && F != Family::kScalar) {
          // Decode: dw * dx folded into one scale per group; 4 W rows at a time keep 4 chains in flight.
          if (!fold_all) {
            const float* dx = xq.d.data() + t * xq.ds;
            for (int64_t i = 0; i < nr; ++i)
              for (int64_t g = 0; g < G; ++g) dwx[size_t(i * ws + g)] = dw[size_t(i * ws + g)] * dx[g];
          }
          for (; r + 4 <= nr; r += 4) {
            at(r, dwx);
            Tile<T, 4, 1, true>::run(a);
          }
          for (; r < nr; ++r) {
            at(r, dwx);
            Tile<T, 1, 1, true>::run(a);
          }
          continue;
        }
        for (; r + 2 <= nr; r += 2) {
          at(r, dw);
          run_tile<Tile, T, 2>(nc, a);
        }
        for (; r < nr; ++r) {
          at(r, dw);
          run_tile<Tile, T, 1>(nc, a);
        }
      }
    }
  });
}

template <Family F, template <QuantType, int, int, bool> class Tile>
void integer_matmul_any(std::span<const QuantMatrix* const> ws, const float* x, int64_t n, std::span<float* const> ys) {
  switch (ws[0]->type) {
    case QuantType::kQ8:
      integer_matmul<F, Tile, QuantType::kQ8>(ws, x, n, ys);
      break;
    case QuantType::kQ4:
      integer_matmul<F, Tile, QuantType::kQ4>(ws, x, n, ys);
      break;
    case QuantType::kMxfp4:
      integer_matmul<F, Tile, QuantType::kMxfp4>(ws, x, n, ys);
      break;
  }
}

// W rows [r0, r0 + nr) -> out [nr, cols] f32 (dw: scratch for nr * G scales).
void dequantize_rows(const QuantMatrix& w, int64_t r0, int64_t nr, float* dw, float* out) {
  const int64_t cols = w.cols, G = cols / kQuantGroup;
  load_scales(w, r0, nr, dw, G, nullptr);
  const bool q8 = w.type == QuantType::kQ8;
  const int64_t stride = q8 ? cols : cols / 2;
  const int8_t* lut = w.type == QuantType::kQ4 ? kQ4Lut : kMxfp4Lut;
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t* row = w.codes.data<uint8_t>() + (r0 + r) * stride;
    for (int64_t g = 0; g < G; ++g) {
      const float d = dw[r * G + g];
      float* o = out + r * cols + g * kQuantGroup;
#if MYRIAD_QUANT_AVX2
      __m128i v0, v1;  // columns 0..15 and 16..31 as int8
      if (q8) {
        v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + g * kQuantGroup));
        v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + g * kQuantGroup + 16));
      } else {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + g * (kQuantGroup / 2)));
        const __m128i m = _mm_set1_epi8(0x0f);
        const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        const __m128i l = _mm_load_si128(reinterpret_cast<const __m128i*>(lut));
        v0 = _mm_shuffle_epi8(l, _mm_unpacklo_epi8(lo, hi));
        v1 = _mm_shuffle_epi8(l, _mm_unpackhi_epi8(lo, hi));
      }
      const __m256 dv = _mm256_set1_ps(d);
      _mm256_storeu_ps(o, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v0))));
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v0, 8)))));
      _mm256_storeu_ps(o + 16, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v1))));
      _mm256_storeu_ps(o + 24, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v1, 8)))));
#else
      if (q8) {
        for (int i = 0; i < kQuantGroup; ++i) o[i] = d * float(int8_t(row[g * kQuantGroup + i]));
      } else {
        const uint8_t* b = row + g * (kQuantGroup / 2);
        for (int i = 0; i < kQuantGroup / 2; ++i) {
          o[2 * i] = d * float(lut[b[i] & 0xf]);
          o[2 * i + 1] = d * float(lut[b[i] >> 4]);
        }
      }
#endif
    }
  }
}

void gemm_matmul(const QuantMatrix& w, const float* x, int64_t n, float* y) {
  const int64_t rows = w.rows, cols = w.cols, G = cols / kQuantGroup;
  // Panels of ~kPanelBytes of f32: large enough that sgemm's packing of x is amortised over many W rows.
  const int64_t panel_rows = std::min(rows, std::max<int64_t>(16, kPanelBytes / (4 * cols) / 16 * 16));
  std::vector<float> buf(size_t(panel_rows * cols)), dw(size_t(panel_rows * G));
  const int nt = num_threads();
  const bool par = nt > 1 && panel_rows * cols >= kParallelWork && !omp_in_parallel();
  for (int64_t r0 = 0; r0 < rows; r0 += panel_rows) {
    const int64_t nr = std::min(panel_rows, rows - r0);
    const int64_t chunks = (nr + 15) / 16;
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t a = c * 16, b = std::min(nr, a + 16);
      dequantize_rows(w, r0 + a, b - a, dw.data() + a * G, buf.data() + a * cols);
    }
    // y[:, r0:r0+nr] = x [n, cols] . panel^T [cols, nr]; the GEMM library threads this itself.
    cpu::gemm(false, true, n, nr, cols, 1.0f, x, cols, buf.data(), cols, 0.0f, y + r0, rows);
  }
}

}  // namespace

int64_t quant_gemm_rows() {
#if MYRIAD_QUANT_AVX512VNNI
  return 16;
#elif MYRIAD_QUANT_AVX2
  return 128;
#else
  return 8;
#endif
}

bool quant_gemm_exact_x() {
#if MYRIAD_QUANT_AVX512VNNI
  return false;
#else
  return true;
#endif
}

const char* quant_kernel_name(QuantKernel k) {
  switch (k) {
    case QuantKernel::kAuto:
      return "auto";
    case QuantKernel::kScalar:
      return "scalar";
    case QuantKernel::kAvx2:
      return "avx2";
    case QuantKernel::kAvx512Vnni:
      return "avx512vnni";
    case QuantKernel::kAvx512VnniGemm:
      return "avx512vnni-gemm";
    case QuantKernel::kDequantGemm:
      return "dequant+sgemm";
  }
  return "?";
}

bool quant_kernel_available(QuantKernel k) {
  switch (k) {
    case QuantKernel::kAvx2:
#if MYRIAD_QUANT_AVX2
      return true;
#else
      return false;
#endif
    case QuantKernel::kAvx512Vnni:
    case QuantKernel::kAvx512VnniGemm:
#if MYRIAD_QUANT_AVX512VNNI
      return true;
#else
      return false;
#endif
    default:
      return true;
  }
}

namespace {
// The integer kernels (kAuto: the best compiled in) over matrices of one width and type.
void integer_path(QuantKernel kernel, std::span<const QuantMatrix* const> ws, const float* x, int64_t n,
                  std::span<float* const> ys) {
  if (kernel == QuantKernel::kAuto) {
#if MYRIAD_QUANT_AVX512VNNI
    kernel = QuantKernel::kAvx512Vnni;
#elif MYRIAD_QUANT_AVX2
    kernel = QuantKernel::kAvx2;
#else
    kernel = QuantKernel::kScalar;
#endif
  }
  switch (kernel) {
#if MYRIAD_QUANT_AVX512VNNI
    case QuantKernel::kAvx512Vnni:
      integer_matmul_any<Family::kVnni, VnniTile>(ws, x, n, ys);
      break;
#endif
#if MYRIAD_QUANT_AVX2
    case QuantKernel::kAvx2:
      integer_matmul_any<Family::kAvx2, Avx2Tile>(ws, x, n, ys);
      break;
#endif
    default:
      integer_matmul_any<Family::kScalar, ScalarTile>(ws, x, n, ys);
      break;
  }
}
}  // namespace

namespace cpu {

void quant_matmul(const QuantMatrix& w, const float* x, int64_t n, float* y, QuantKernel kernel) {
  check_quant_matrix(w, "quant_matmul");
  MYRIAD_REQUIRE(n >= 0, kShape, "quant_matmul: n = ", n, " rows of x must be >= 0");
  MYRIAD_REQUIRE(quant_kernel_available(kernel), kUnsupported, "quant_matmul: kernel ", quant_kernel_name(kernel),
                 " is not compiled into this build");
  if (n == 0 || w.rows == 0) return;
  MYRIAD_REQUIRE(x != nullptr && y != nullptr, kValue, "quant_matmul: null x or y");
  // kAuto: the GEMM-shaped path from quant_gemm_rows() rows, else the best row-strip integer kernel.
  if (kernel == QuantKernel::kAuto && n >= quant_gemm_rows())
    kernel = quant_gemm_exact_x() ? QuantKernel::kDequantGemm : QuantKernel::kAvx512VnniGemm;
  if (kernel == QuantKernel::kAvx512VnniGemm) {
    quant::vnni_quant_gemm(w, x, n, y);
    return;
  }
  if (kernel == QuantKernel::kDequantGemm) {
    gemm_matmul(w, x, n, y);
    return;
  }
  const QuantMatrix* wp = &w;
  integer_path(kernel, std::span<const QuantMatrix* const>(&wp, 1), x, n, std::span<float* const>(&y, 1));
}

void quant_matmul_many(std::span<const QuantMatrix* const> ws, const float* x, int64_t n, std::span<float* const> ys) {
  MYRIAD_REQUIRE(!ws.empty() && ws.size() == ys.size(), kValue, "quant_matmul_many: ", ws.size(), " weights for ",
                 ys.size(), " outputs (need the same number, at least one)");
  for (const QuantMatrix* w : ws) {
    MYRIAD_REQUIRE(w != nullptr, kValue, "quant_matmul_many: a null weight");
    check_quant_matrix(*w, "quant_matmul_many");
    MYRIAD_REQUIRE(w->cols == ws[0]->cols && w->type == ws[0]->type, kShape,
                   "quant_matmul_many: every weight must have the first one's width and type (", ws[0]->cols, ", ",
                   quant_type_name(ws[0]->type), "), got ", w->cols, ", ", quant_type_name(w->type));
  }
  MYRIAD_REQUIRE(n >= 0, kShape, "quant_matmul_many: n = ", n, " rows of x must be >= 0");
  if (n == 0) return;
  MYRIAD_REQUIRE(x != nullptr, kValue, "quant_matmul_many: null x");
  for (float* y : ys) MYRIAD_REQUIRE(y != nullptr, kValue, "quant_matmul_many: null y");
  if (n >= quant_gemm_rows()) {  // compute-bound: each its own GEMM-shaped product
    for (size_t m = 0; m < ws.size(); ++m) quant_matmul(*ws[m], x, n, ys[m], QuantKernel::kAuto);
    return;
  }
  integer_path(QuantKernel::kAuto, ws, x, n, ys);
}

}  // namespace cpu

}  // namespace myriad
