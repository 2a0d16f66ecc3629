#include "ops/cpu/latent_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_* (see quant_matmul.cc)
#endif
#include <immintrin.h>
#define MYRIAD_LATENT_Q8_VNNI 1
#endif

namespace myriad::cpu {

namespace {

constexpr int64_t kGroup = kLatentQ8Group;
constexpr int64_t kBlock = kLatentQ8Block;
constexpr int64_t kValueChunkPairs = 128;  // token pairs summed in int32 before a flush: 256 x 32767 x 127 < 2^31
constexpr float kP16 = 32767.0f;           // the largest 16-bit factor

// The scalar parts of the scale: s = max|x| / 127 (NaN when x has a non-finite value), codes round(x / s).
float quantize_group(const float* x, int64_t n, int8_t* codes) {
  if (n <= 0) return 0;
  float amax = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    finite = finite && std::isfinite(x[i]);
  }
  std::fill(codes, codes + n, int8_t(0));
  if (!finite) return std::numeric_limits<float>::quiet_NaN();
  if (amax == 0) return 0;
  const float inv = 127.0f / amax;
  for (int64_t i = 0; i < n; ++i) codes[i] = int8_t(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
  return amax / 127.0f;
}

const uint8_t* keys(const LatentQ8Layout& l, const uint8_t* page) {
  return page + l.key_offset;
}
const int8_t* values(const LatentQ8Layout& l, const uint8_t* page) {
  return reinterpret_cast<const int8_t*>(page + l.value_offset);
}
const float* scales(const LatentQ8Layout& l, const uint8_t* page) {
  return reinterpret_cast<const float*>(page + l.scale_offset);
}

// Per head h and value group g, the 16-bit factors q16 ~ p s / step of the tokens (step = the largest p s /
// 32767), stored so that the int32 at pair k holds tokens 2k (low half) and 2k + 1 (high half): what vpdpwssd
// multiplies with a pair of value rows. step NaN when a factor is NaN (or p < 0).
struct ValueFactors {
  int64_t np = 0;             // pairs per (head, group)
  std::vector<uint16_t> q16;  // [H, Gv, 2 np]
  std::vector<float> step;    // [H, Gv]
  int32_t pair(int64_t hg, int64_t k) const {
    int32_t v;
    std::memcpy(&v, q16.data() + hg * 2 * np + 2 * k, 4);
    return v;
  }
};

void value_factors(const LatentQ8Layout& l, const float* s, int64_t n, const float* p, int64_t ldp, int64_t H,
                   ValueFactors& v) {
  const int64_t Gv = l.value_groups(), ss = l.blocks * kBlock;
  v.np = (n + 1) / 2;
  const int64_t len = 2 * v.np;
  v.q16.resize(size_t(H * Gv * len));
  v.step.assign(size_t(H * Gv), 0.0f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t g = 0; g < Gv; ++g) {
      const float* ph = p + h * ldp;
      const float* sg = s + g * ss;
      uint16_t* out = v.q16.data() + (h * Gv + g) * len;
      float pm = 0;
      bool bad = false;
      int64_t j = 0;
#if MYRIAD_LATENT_Q8_VNNI
      __m512 vmax = _mm512_setzero_ps();
      __mmask16 nonneg = 0xffff;
      for (; j + 16 <= n; j += 16) {
        const __m512 f = _mm512_mul_ps(_mm512_loadu_ps(ph + j), _mm512_loadu_ps(sg + j));
        nonneg &= _mm512_cmp_ps_mask(f, _mm512_setzero_ps(), _CMP_GE_OQ);  // false for NaN and < 0
        vmax = _mm512_max_ps(vmax, f);
      }
      bad = nonneg != 0xffff;
      pm = _mm512_reduce_max_ps(vmax);
#endif
      for (int64_t t = j; t < n; ++t) {
        const float f = ph[t] * sg[t];
        bad = bad || !(f >= 0.0f);
        pm = std::max(pm, f);
      }
      float& step = v.step[size_t(h * Gv + g)];
      if (bad || pm == 0) {
        step = bad ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
        std::fill(out, out + len, uint16_t(0));
        continue;
      }
      step = pm / kP16;
      const float inv = kP16 / pm;  // f * inv in [0, 32767]: rounded to nearest even (the SIMD conversion's mode)
      j = 0;
#if MYRIAD_LATENT_Q8_VNNI
      const __m512 vinv = _mm512_set1_ps(inv);
      for (; j + 16 <= n; j += 16) {
        const __m512 f = _mm512_mul_ps(_mm512_loadu_ps(ph + j), _mm512_loadu_ps(sg + j));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j),
                            _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(f, vinv))));
      }
#endif
      for (; j < n; ++j) out[j] = uint16_t(std::nearbyint((ph[j] * sg[j]) * inv));
      for (; j < len; ++j) out[j] = 0;
    }
}

// ---- portable kernels (the same integer sums as the SIMD ones) ----

void scores_portable(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const LatentQ8Query& q, float* S,
                     int64_t lds) {
  const uint8_t* kb = keys(l, page);
  const float* s = scales(l, page);
  const int64_t Q4 = l.quads * 4, ss = l.blocks * kBlock;
  for (int64_t h = 0; h < q.H; ++h)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t b = j / kBlock, i = j % kBlock;
      float acc = 0;
      for (int64_t g = 0; g < l.groups; ++g) {
        int32_t sum = q.bias[size_t(h * l.groups + g)];
        for (int64_t qd = 8 * g; qd < std::min(8 * g + 8, l.quads); ++qd)
          for (int64_t m = 0; m < 4; ++m)
            sum += int32_t(q.codes[size_t(h * Q4 + 4 * qd + m)]) * int32_t(kb[(b * l.quads + qd) * 64 + i * 4 + m]);
        acc += float(sum) * (q.scale[size_t(h * l.groups + g)] * s[g * ss + j]);
      }
      S[h * lds + j] = acc;
    }
}

void values_portable(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const ValueFactors& v, int64_t H,
                     float* o, int64_t ldo) {
  const int8_t* vb = values(l, page);
  const int64_t Gv = l.value_groups(), np = (n + 1) / 2, VC = l.value_cols;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t g = 0; g < Gv; ++g) {
      const float step = v.step[size_t(h * Gv + g)];
      const int64_t c0 = g * kGroup, c1 = std::min(c0 + kGroup, l.C);
      if (std::isnan(step)) {
        for (int64_t c = c0; c < c1; ++c) o[h * ldo + c] += step;
        continue;
      }
      if (step == 0) continue;
      const uint16_t* q16 = v.q16.data() + (h * Gv + g) * 2 * np;
      for (int64_t k0 = 0; k0 < np; k0 += kValueChunkPairs)
        for (int64_t c = c0; c < c1; ++c) {
          int32_t sum = 0;
          for (int64_t k = k0; k < std::min(np, k0 + kValueChunkPairs); ++k)
            sum += int32_t(q16[2 * k]) * vb[k * VC * 2 + c * 2] + int32_t(q16[2 * k + 1]) * vb[k * VC * 2 + c * 2 + 1];
          o[h * ldo + c] += float(sum) * step;
        }
    }
}

#if MYRIAD_LATENT_Q8_VNNI
// HT heads from h0 over all of the page's n tokens, 16 at a time.
template <int HT>
void scores_vnni(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const LatentQ8Query& q, int64_t h0, float* S,
                 int64_t lds, const uint8_t* next) {
  const uint8_t* kb = keys(l, page);
  const float* s = scales(l, page);
  const int64_t Q4 = l.quads * 4, ss = l.blocks * kBlock;
  const int8_t* qc = q.codes.data() + h0 * Q4;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  const int64_t lines = int64_t(l.bytes / 64), per_block = nb > 0 ? (lines + nb - 1) / nb : 0;
  for (int64_t b = 0; b < nb; ++b) {
    if (next)  // this block's share of the next page
      for (int64_t i = b * per_block; i < std::min(lines, (b + 1) * per_block); ++i)
        _mm_prefetch(reinterpret_cast<const char*>(next + i * 64), _MM_HINT_T0);
    __m512 sf[HT];
    for (int h = 0; h < HT; ++h) sf[h] = _mm512_setzero_ps();
    for (int64_t g = 0; g < l.groups; ++g) {
      __m512i acc[HT];
      for (int h = 0; h < HT; ++h) acc[h] = _mm512_set1_epi32(q.bias[size_t((h0 + h) * l.groups + g)]);
      const uint8_t* kq = kb + (b * l.quads + 8 * g) * 64;
      const int64_t nq = std::min<int64_t>(8, l.quads - 8 * g);
      for (int64_t j = 0; j < nq; ++j) {
        const __m512i x = _mm512_loadu_si512(kq + j * 64);
        for (int h = 0; h < HT; ++h) {
          int32_t w;
          std::memcpy(&w, qc + h * Q4 + (8 * g + j) * 4, 4);
          acc[h] = _mm512_dpbusd_epi32(acc[h], x, _mm512_set1_epi32(w));
        }
      }
      const __m512 sv = _mm512_loadu_ps(s + g * ss + b * kBlock);
      for (int h = 0; h < HT; ++h)
        sf[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h]),
                                _mm512_mul_ps(sv, _mm512_set1_ps(q.scale[size_t((h0 + h) * l.groups + g)])), sf[h]);
    }
    const int64_t m = std::min<int64_t>(kBlock, n - b * kBlock);
    const __mmask16 mask = __mmask16((1u << m) - 1u);
    for (int h = 0; h < HT; ++h) _mm512_mask_storeu_ps(S + (h0 + h) * lds + b * kBlock, mask, sf[h]);
  }
}

// HT heads from h0, value group g, all n tokens.
template <int HT>
void values_vnni(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const ValueFactors& v, int64_t h0, int64_t g,
                 float* o, int64_t ldo) {
  const int8_t* vb = values(l, page);
  const int64_t Gv = l.value_groups(), np = (n + 1) / 2, VC = l.value_cols;
  const int64_t c0 = g * kGroup;
  const int64_t w0 = std::clamp<int64_t>(l.C - c0, 0, 16), w1 = std::clamp<int64_t>(l.C - c0 - 16, 0, 16);
  const __mmask16 m0 = __mmask16((1u << w0) - 1u), m1 = __mmask16((1u << w1) - 1u);
  for (int64_t k0 = 0; k0 < np; k0 += kValueChunkPairs) {
    const int64_t k1 = std::min(np, k0 + kValueChunkPairs);
    __m512i acc[HT][2];
    for (int h = 0; h < HT; ++h) acc[h][0] = acc[h][1] = _mm512_setzero_si512();
    for (int64_t k = k0; k < k1; ++k) {
      const int8_t* src = vb + k * VC * 2 + c0 * 2;
      const __m512i x0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
      const __m512i x1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32)));
      for (int h = 0; h < HT; ++h) {
        const __m512i f = _mm512_set1_epi32(v.pair((h0 + h) * Gv + g, k));
        acc[h][0] = _mm512_dpwssd_epi32(acc[h][0], x0, f);
        acc[h][1] = _mm512_dpwssd_epi32(acc[h][1], x1, f);
      }
    }
    for (int h = 0; h < HT; ++h) {
      const __m512 st = _mm512_set1_ps(v.step[size_t((h0 + h) * Gv + g)]);
      float* oh = o + (h0 + h) * ldo + c0;
      _mm512_mask_storeu_ps(oh, m0, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][0]), st, _mm512_maskz_loadu_ps(m0, oh)));
      if (w1 > 0)
        _mm512_mask_storeu_ps(oh + 16, m1,
                              _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][1]), st, _mm512_maskz_loadu_ps(m1, oh + 16)));
    }
  }
}

template <class Fn>
void head_tiles(int64_t H, Fn&& fn) {
  int64_t h = 0;
  for (; h + 8 <= H; h += 8) fn(std::integral_constant<int, 8>{}, h);
  for (; h + 4 <= H; h += 4) fn(std::integral_constant<int, 4>{}, h);
  for (; h < H; ++h) fn(std::integral_constant<int, 1>{}, h);
}
#endif

}  // namespace

void latent_q8_init_page(const LatentQ8Layout& l, uint8_t* page) {
  std::memset(page, 0x80, l.value_offset);  // keys: code 0 stored as 128
  std::memset(page + l.value_offset, 0, l.bytes - l.value_offset);
}

void latent_q8_store_row(const LatentQ8Layout& l, uint8_t* page, int64_t r, const float* x) {
  MYRIAD_CHECK(r >= 0 && r < l.P, "latent q8 page: row ", r, " of ", l.P);
  const int64_t b = r / kBlock, i = r % kBlock, ss = l.blocks * kBlock;
  float* s = reinterpret_cast<float*>(page + l.scale_offset);
  uint8_t* kb = page + l.key_offset;
  int8_t* vb = reinterpret_cast<int8_t*>(page + l.value_offset);
  int8_t codes[kGroup];
  for (int64_t g = 0; g < l.groups; ++g) {
    const int64_t c0 = g * kGroup, n = std::min(kGroup, l.W - c0);
    s[g * ss + r] = quantize_group(x + c0, n, codes);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t d = c0 + k;
      kb[(b * l.quads + d / 4) * 64 + i * 4 + d % 4] = uint8_t(int32_t(codes[k]) + 128);
      if (d < l.C) vb[(r / 2) * l.value_cols * 2 + d * 2 + r % 2] = codes[k];
    }
  }
}

void latent_q8_load_rows(const LatentQ8Layout& l, const uint8_t* page, int64_t r0, int64_t n, float* out, int64_t ldo) {
  MYRIAD_CHECK(r0 >= 0 && n >= 0 && r0 + n <= l.P, "latent q8 page: rows ", r0, " + ", n, " of ", l.P);
  const uint8_t* kb = keys(l, page);
  const float* s = scales(l, page);
  const int64_t ss = l.blocks * kBlock;
  // Prefill widens a whole cache with this: by group and quad (4 stored bytes of the row per quad), no division
  // per element.
  for (int64_t r = r0; r < r0 + n; ++r) {
    const uint8_t* row = kb + (r / kBlock) * l.quads * 64 + (r % kBlock) * 4;  // quad j at row + 64 j
    float* o = out + (r - r0) * ldo;
    for (int64_t g = 0; g < l.groups; ++g) {
      const float step = s[g * ss + r];
      for (int64_t d = g * kGroup; d < std::min(l.W, (g + 1) * kGroup); ++d)
        o[d] = step * float(int32_t(row[(d >> 2) * 64 + (d & 3)]) - 128);
    }
  }
}

void latent_q8_quantize_query(const LatentQ8Layout& l, const float* q, int64_t H, int64_t ldq, LatentQ8Query& out) {
  const int64_t Q4 = l.quads * 4;
  out.H = H;
  out.codes.assign(size_t(H * Q4), 0);
  out.scale.assign(size_t(H * l.groups), 0.0f);
  out.bias.assign(size_t(H * l.groups), 0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t g = 0; g < l.groups; ++g) {
      const int64_t c0 = g * kGroup, n = std::min(kGroup, l.W - c0);
      int8_t* codes = out.codes.data() + h * Q4 + c0;
      out.scale[size_t(h * l.groups + g)] = quantize_group(q + h * ldq + c0, n, codes);
      int32_t sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += codes[k];
      out.bias[size_t(h * l.groups + g)] = -128 * sum;
    }
}

void latent_q8_scores(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const LatentQ8Query& q, float* S,
                      int64_t lds, const uint8_t* next) {
  MYRIAD_CHECK(n >= 0 && n <= l.P, "latent q8 scores: ", n, " tokens of a ", l.P, "-token page");
#if MYRIAD_LATENT_Q8_VNNI
  head_tiles(q.H, [&](auto ht, int64_t h0) {
    scores_vnni<decltype(ht)::value>(l, page, n, q, h0, S, lds, h0 == 0 ? next : nullptr);
  });
#else
  (void)next;
  scores_portable(l, page, n, q, S, lds);
#endif
}

void latent_q8_values(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const float* p, int64_t ldp, int64_t H,
                      float* o, int64_t ldo) {
  MYRIAD_CHECK(n >= 0 && n <= l.P, "latent q8 values: ", n, " tokens of a ", l.P, "-token page");
  if (n == 0) return;
  thread_local ValueFactors v;
  value_factors(l, scales(l, page), n, p, ldp, H, v);
#if MYRIAD_LATENT_Q8_VNNI
  for (int64_t g = 0; g < l.value_groups(); ++g)
    head_tiles(H, [&](auto ht, int64_t h0) { values_vnni<decltype(ht)::value>(l, page, n, v, h0, g, o, ldo); });
#else
  values_portable(l, page, n, v, H, o, ldo);
#endif
}

bool latent_q8_native() {
#if MYRIAD_LATENT_Q8_VNNI
  return true;
#else
  return false;
#endif
}

// The portable kernels, for tests of the SIMD ones (same integer sums).
void latent_q8_scores_portable(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const LatentQ8Query& q,
                               float* S, int64_t lds) {
  scores_portable(l, page, n, q, S, lds);
}
void latent_q8_values_portable(const LatentQ8Layout& l, const uint8_t* page, int64_t n, const float* p, int64_t ldp,
                               int64_t H, float* o, int64_t ldo) {
  if (n == 0) return;
  ValueFactors v;
  value_factors(l, scales(l, page), n, p, ldp, H, v);
  values_portable(l, page, n, v, H, o, ldo);
}

}  // namespace myriad::cpu
