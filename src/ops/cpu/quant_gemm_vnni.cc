// The packed int8 GEMM of quant_matmul for prefill-sized x on AVX512-VNNI: y[n, rows] = x[n, cols] . W^T with W
// block-quantized (q8, q4, mxfp4) and x quantized per group of 32 to int8 (ops/cpu/quant_int8.h).
//
// Why a second integer kernel: the row-strip kernels of decode (quant_matmul.cc) put the 32 columns of one group of
// one W row in a vector, so every vpdpbusd (64 multiply-adds) is followed by a conversion and an FMA that apply the
// group's two scales; at 1 : 2 the scaling costs twice the products and the int8 path is no faster than f32. Here the
// lanes are 16 W rows: a vector holds 4 consecutive columns of each of 16 rows, x's 4 bytes are broadcast, and the 8
// vpdpbusd of one group accumulate in int32 before one conversion and one FMA per 16 outputs (8 : 3). The bound is
// then ~2.9x the f32 FMA peak (both FMA ports run vpdpbusd on these cores); the products are the same exact integer
// group sums as the other integer kernels, so only the f32 order of the scaled group sums differs.
//
// W is repacked panel by panel into a per-thread buffer (each thread owns whole panels: no synchronisation), with the
// 4-bit codes widened to bytes and every code biased to u8 (q8: w + 128; q4: code; mxfp4: 2 e2m1 + 12); the bias is
// removed exactly by starting each group's accumulator at -bias * sum(x_g) (XQuant::init, summed per group).
//   panel  blocks of 16 W rows; block b, group g:  codes [8 chunks k][16 rows][4 bytes] (column g 32 + 4 k + byte)
//                                                   scales [16 rows] f32 (dw; mxfp4's halved for its doubled codes)
//   tile   2 blocks (32 rows) x 6 tokens: 12 int32 and 12 f32 accumulators, 2 W vectors, 1 broadcast (27 zmm)
// Loop order per thread: its panels (~256 KiB of packed W, in L2) x all token tiles (x streams from L1/L2).
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "core/threads.h"
#include "ops/cpu/quant_int8.h"

#if MYRIAD_QUANT_AVX512VNNI
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 headers (see quant_matmul.cc)
#endif
#include <immintrin.h>
#endif

namespace myriad::cpu::quant {

#if MYRIAD_QUANT_AVX512VNNI
namespace {

constexpr int64_t kBlockRows = 16;
constexpr int64_t kGroupBytes = 8 * 64;  // one block's packed group: 8 chunks x 16 rows x 4 bytes
constexpr int kTileBlocks = 2;
constexpr int kTileTokens = 6;
constexpr int64_t kPanelTarget = int64_t(256) << 10;  // packed bytes of W per panel

// 64-byte aligned scratch that keeps its storage between calls.
template <class T>
T* aligned_scratch(std::vector<unsigned char>& buf, int64_t count) {
  const size_t need = size_t(count) * sizeof(T) + 64;
  if (buf.size() < need) buf.resize(need);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<T*>((p + 63) & ~uintptr_t(63));
}

// W rows [r0, r0 + 16) (rows past w.rows: code 0 and scale 0) -> one packed block. tmp: 16 G floats.
template <QuantType T>
void pack_block(const QuantMatrix& w, int64_t r0, uint8_t* codes, float* scales, float* tmp) {
  const int64_t G = w.cols / kQuantGroup, nr = std::min(kBlockRows, w.rows - r0);
  load_scales(w, r0, nr, tmp, G, nullptr);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = 0; r < kBlockRows; ++r) scales[g * kBlockRows + r] = r < nr ? tmp[r * G + g] : 0.0f;
  const int64_t stride = T == QuantType::kQ8 ? w.cols : w.cols / 2;
  uint32_t* out = reinterpret_cast<uint32_t*>(codes);  // [g][k][r]
  for (int64_t r = 0; r < kBlockRows; ++r) {
    if (r >= nr) {
      for (int64_t gk = 0; gk < G * 8; ++gk) out[gk * kBlockRows + r] = 0;
      continue;
    }
    const uint8_t* row = w.codes.data<uint8_t>() + (r0 + r) * stride;
    for (int64_t gk = 0; gk < G * 8; ++gk) {
      uint32_t v;
      if constexpr (T == QuantType::kQ8) {
        std::memcpy(&v, row + gk * 4, 4);
        v ^= 0x80808080u;  // s8 -> u8 = w + 128
      } else {
        uint16_t h;  // columns 4 gk .. 4 gk + 3: low nibble first
        std::memcpy(&h, row + gk * 2, 2);
        v = (h & 0xfu) | ((h & 0xf0u) << 4) | ((h & 0xf00u) << 8) | ((h & 0xf000u) << 12);
      }
      out[gk * kBlockRows + r] = v;
    }
  }
  if constexpr (T == QuantType::kMxfp4) {  // code -> 2 e2m1 + 12
    const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4ULut)));
    for (int64_t i = 0; i < G * kGroupBytes; i += 64) {
      const __m512i c = _mm512_load_si512(codes + i);
      _mm512_store_si512(codes + i, _mm512_shuffle_epi8(lut, c));
    }
  }
}

// NV blocks x C tokens over all G groups. codes / scales: the first block's group 0 (block stride bs / ss);
// y: token 0, row 0 of the first block (token stride ldy); the last block stores only `last` rows.
template <int NV, int C>
void tile(const uint8_t* codes, int64_t bs, const float* scales, int64_t ss, const int8_t* xq, int64_t qs,
          const int32_t* gi, int64_t gis, const float* dx, int64_t ds, int64_t G, float* y, int64_t ldy,
          __mmask16 last) {
  __m512 f[NV][C];
  for (int j = 0; j < NV; ++j)
    for (int c = 0; c < C; ++c) f[j][c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m512i a[NV][C];
    for (int c = 0; c < C; ++c) {
      const __m512i i0 = _mm512_set1_epi32(gi[c * gis + g]);  // -bias * sum(x_g)
      for (int j = 0; j < NV; ++j) a[j][c] = i0;
    }
    const uint8_t* wg = codes + g * kGroupBytes;
    const int8_t* xg = xq + g * kQuantGroup;
    for (int k = 0; k < 8; ++k) {
      __m512i wv[NV];
      for (int j = 0; j < NV; ++j) wv[j] = _mm512_load_si512(wg + j * bs + k * 64);
      for (int c = 0; c < C; ++c) {
        int32_t x4;
        std::memcpy(&x4, xg + c * qs + 4 * k, 4);
        const __m512i xb = _mm512_set1_epi32(x4);
        for (int j = 0; j < NV; ++j) a[j][c] = _mm512_dpbusd_epi32(a[j][c], wv[j], xb);
      }
    }
    __m512 sw[NV];
    for (int j = 0; j < NV; ++j) sw[j] = _mm512_load_ps(scales + j * ss + g * kBlockRows);
    for (int c = 0; c < C; ++c) {
      const __m512 sx = _mm512_set1_ps(dx[c * ds + g]);
      for (int j = 0; j < NV; ++j)
        f[j][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[j][c]), _mm512_mul_ps(sw[j], sx), f[j][c]);
    }
  }
  for (int c = 0; c < C; ++c)
    for (int j = 0; j < NV; ++j) {
      float* o = y + c * ldy + j * kBlockRows;
      if (j == NV - 1)
        _mm512_mask_storeu_ps(o, last, f[j][c]);
      else
        _mm512_storeu_ps(o, f[j][c]);
    }
}

using TileFn = void (*)(const uint8_t*, int64_t, const float*, int64_t, const int8_t*, int64_t, const int32_t*, int64_t,
                        const float*, int64_t, int64_t, float*, int64_t, __mmask16);

template <int NV, int... Cs>
constexpr std::array<TileFn, sizeof...(Cs)> tiles_of(std::integer_sequence<int, Cs...>) {
  return {&tile<NV, Cs + 1>...};
}
constexpr auto kTiles1 = tiles_of<1>(std::make_integer_sequence<int, kTileTokens>{});
constexpr auto kTiles2 = tiles_of<2>(std::make_integer_sequence<int, kTileTokens>{});

template <QuantType T>
void gemm(const QuantMatrix& w, const float* x, int64_t n, float* y) {
  const int64_t rows = w.rows, cols = w.cols, G = cols / kQuantGroup;
  const XQuant& xq = quantize_x(x, n, cols, Family::kVnni, QuantType::kQ8, kBias<Family::kVnni, T>);
  // One accumulator start per token and group: the sum of the group's 8 lane corrections.
  thread_local std::vector<int32_t> gi_buf;
  gi_buf.assign(size_t(n * G), 0);
  int32_t* gi = gi_buf.data();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < G; ++g) {
      const int32_t* l = xq.init.data() + t * xq.is + g * 8;
      gi[t * G + g] = l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
    }
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int nt = num_threads();
  const bool par = nt > 1 && blocks > 1 && !omp_in_parallel();
  const int parts_wanted = par ? nt : 1;
  // Panels of ~kPanelTarget packed bytes, an even number of blocks, and at least one per thread.
  int64_t panel_blocks = std::max<int64_t>(kTileBlocks, kPanelTarget / (G * kGroupBytes));
  panel_blocks = std::min(panel_blocks, (blocks + parts_wanted - 1) / parts_wanted);
  panel_blocks = std::max<int64_t>(1, (panel_blocks + 1) / 2 * 2);
  const int64_t panels = (blocks + panel_blocks - 1) / panel_blocks;
  const int64_t bs = G * kGroupBytes, ss = G * kBlockRows;
  parallel_region(parts_wanted, [&](int part, int parts) {
    thread_local std::vector<unsigned char> code_buf, scale_buf, tmp_buf;
    uint8_t* codes = aligned_scratch<uint8_t>(code_buf, panel_blocks * bs);
    float* scales = aligned_scratch<float>(scale_buf, panel_blocks * ss);
    float* tmp = aligned_scratch<float>(tmp_buf, kBlockRows * G);
    for (int64_t p = part_begin(panels, part, parts); p < part_begin(panels, part + 1, parts); ++p) {
      const int64_t b0 = p * panel_blocks, nb = std::min(panel_blocks, blocks - b0);
      for (int64_t b = 0; b < nb; ++b) pack_block<T>(w, (b0 + b) * kBlockRows, codes + b * bs, scales + b * ss, tmp);
      for (int64_t t = 0; t < n; t += kTileTokens) {
        const int64_t c = std::min<int64_t>(kTileTokens, n - t);
        for (int64_t b = 0; b < nb; b += kTileBlocks) {
          const int64_t nv = std::min<int64_t>(kTileBlocks, nb - b);
          const int64_t r0 = (b0 + b) * kBlockRows;
          const int64_t last_rows = std::min(kBlockRows, rows - (r0 + (nv - 1) * kBlockRows));
          const __mmask16 last = __mmask16((1u << last_rows) - 1);
          const TileFn fn = (nv == 2 ? kTiles2 : kTiles1)[size_t(c - 1)];
          fn(codes + b * bs, bs, scales + b * ss, ss, xq.q.data() + t * xq.qs, xq.qs, gi + t * G, G,
             xq.d.data() + t * xq.ds, xq.ds, G, y + t * rows + r0, rows, last);
        }
      }
    }
  });
}

}  // namespace
#endif  // MYRIAD_QUANT_AVX512VNNI

void vnni_quant_gemm(const QuantMatrix& w, const float* x, int64_t n, float* y) {
#if MYRIAD_QUANT_AVX512VNNI
  switch (w.type) {
    case QuantType::kQ8:
      gemm<QuantType::kQ8>(w, x, n, y);
      return;
    case QuantType::kQ4:
      gemm<QuantType::kQ4>(w, x, n, y);
      return;
    case QuantType::kMxfp4:
      gemm<QuantType::kMxfp4>(w, x, n, y);
      return;
  }
#else
  (void)w, (void)x, (void)n, (void)y;
  MYRIAD_REQUIRE(false, kUnsupported, "quant_matmul: the packed int8 GEMM needs an AVX512-VNNI build");
#endif
}

}  // namespace myriad::cpu::quant
