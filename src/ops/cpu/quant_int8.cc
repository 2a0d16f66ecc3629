// x quantized per group for the integer kernels, and W's scales as f32 (ops/cpu/quant_int8.h).
#include "ops/cpu/quant_int8.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/threads.h"

#if defined(__AVX2__) || defined(__F16C__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 headers (see quant_matmul.cc)
#endif
#include <immintrin.h>
#endif

namespace myriad::cpu::quant {

// mxfp4's halved (doubled codes).
void load_scales(const QuantMatrix& w, int64_t r0, int64_t nr, float* out, int64_t stride, const float* dx) {
  const int64_t G = w.cols / kQuantGroup;
  if (w.type == QuantType::kMxfp4) {
    const uint8_t* e = w.scales.data<uint8_t>() + r0 * G;
    for (int64_t r = 0; r < nr; ++r) {
      float* o = out + r * stride;
      int64_t g = 0;
#if MYRIAD_QUANT_AVX2
      for (; g + 8 <= G; g += 8) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e + r * G + g)));
        // e in [2, 254]: the float with exponent field e - 1; other lanes (subnormal results, NaN) go scalar.
        const __m256i normal = _mm256_and_si256(_mm256_cmpgt_epi32(v, _mm256_set1_epi32(1)),
                                                _mm256_cmpgt_epi32(_mm256_set1_epi32(255), v));
        if (_mm256_movemask_epi8(normal) != -1) break;
        __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23));
        if (dx) f = _mm256_mul_ps(f, _mm256_loadu_ps(dx + g));
        _mm256_storeu_ps(o + g, f);
      }
#endif
      for (; g < G; ++g) o[g] = half_e8m0(e[r * G + g]) * (dx ? dx[g] : 1.0f);
    }
    return;
  }
  const uint16_t* h = w.scales.data<uint16_t>() + r0 * G;
  for (int64_t r = 0; r < nr; ++r) {
    float* o = out + r * stride;
    int64_t g = 0;
#if defined(__F16C__) && defined(__AVX__)
    for (; g + 8 <= G; g += 8) {
      __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + r * G + g)));
      if (dx) f = _mm256_mul_ps(f, _mm256_loadu_ps(dx + g));
      _mm256_storeu_ps(o + g, f);
    }
#endif
    for (; g < G; ++g) o[g] = f16_to_f32(h[r * G + g]) * (dx ? dx[g] : 1.0f);
  }
}

// Into a per-thread XQuant that keeps its buffers from call to call (decode quantizes x for every product).
const XQuant& quantize_x(const float* x, int64_t n, int64_t cols, Family f, QuantType type, int32_t bias) {
  const int64_t G = cols / kQuantGroup;
  thread_local XQuant mine;
  XQuant& xq = mine;  // the caller's (a worker thread naming `mine` would get its own)
  // Prefill-sized x is quantized by all threads (rows are independent; the result does not depend on the split).
  const int nt = num_threads();
  const bool par = nt > 1 && n >= 8 && n * cols >= (int64_t(1) << 16) && !omp_in_parallel();
  const bool four_bit = type != QuantType::kQ8;
  const bool quads = four_bit && f == Family::kVnni;  // the 4-bit VNNI order: four groups per step
  const int64_t step = f != Family::kVnni ? 1
                       : quads            ? kVnniStepGroups<QuantType::kQ4>
                                          : kVnniStepGroups<QuantType::kQ8>;
  xq.Gp = (G + step - 1) / step * step;
  xq.qs = xq.Gp * kQuantGroup;
  xq.is = xq.Gp * (quads ? 4 : 8);
  xq.ds = xq.Gp + 16;
  xq.q.assign(size_t(n * xq.qs), 0);
  xq.init.assign(size_t(n * xq.is), 0);
  xq.d.assign(size_t(n * xq.ds), 0.0f);
#if MYRIAD_QUANT_AVX512VNNI
  if (f == Family::kVnni) {
    // VNNI: the same rounding as the loop below (x * (127 / amax) rounded to nearest even, clamped), 32 columns at
    // a time, stored in the order above (4-bit: the 16 even columns and the 16 odd ones 64 bytes apart); each
    // lane's byte sum through vpdpbusd with ones. Decode quantizes x for every product on the calling thread, while the
    // other waits.
    const __m512 sign = _mm512_set1_ps(-0.0f), zero = _mm512_setzero_ps();
    const __m512i ones = _mm512_set1_epi8(1);
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t t = 0; t < n; ++t) {
      int8_t* qrow = xq.q.data() + t * xq.qs;
      for (int64_t g = 0; g < G; ++g) {
        const float* xg = x + t * cols + g * kQuantGroup;
        const __m512 a = _mm512_loadu_ps(xg), b = _mm512_loadu_ps(xg + 16);
        const __mmask16 fa = _mm512_cmp_ps_mask(_mm512_sub_ps(a, a), zero, _CMP_EQ_OQ);
        const __mmask16 fb = _mm512_cmp_ps_mask(_mm512_sub_ps(b, b), zero, _CMP_EQ_OQ);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, a), _mm512_andnot_ps(sign, b)));
        __m256i q = _mm256_setzero_si256();
        float d = amax / 127.0f;
        if (fa != 0xffff || fb != 0xffff) {
          d = std::numeric_limits<float>::quiet_NaN();
        } else if (amax > 0) {
          const __m512 id = _mm512_set1_ps(127.0f / amax), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
          const __m512 ra = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(_mm512_mul_ps(a, id), 0), lo), hi);
          const __m512 rb = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(_mm512_mul_ps(b, id), 0), lo), hi);
          q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(_mm512_cvtps_epi32(ra))),
                                      _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(rb)), 1);
        }
        xq.d[size_t(t * xq.ds + g)] = d;
        if (!four_bit) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(qrow + g * kQuantGroup), q);
        } else {
          // Per 128-bit lane: its 8 even columns, then its 8 odd ones; then the quadwords as [even 0-7, even 8-15,
          // odd 0-7, odd 8-15].
          const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8,
                                                 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
          const __m256i p = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(q, split), 0xd8);
          int8_t* base = qrow + (g / 4) * 128 + (g % 4) * 16;
          _mm_storeu_si128(reinterpret_cast<__m128i*>(base), _mm256_castsi256_si128(p));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(base + 64), _mm256_extracti128_si256(p, 1));
        }
      }
      // init = -bias * (sum of the stored bytes of each lane); the padding groups are zero.
      const int64_t step_bytes = quads ? 128 : 64;
      for (int64_t l0 = 0, b = 0; l0 < xq.is; l0 += 16, b += step_bytes) {
        __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(qrow + b));
        if (quads) sum = _mm512_dpbusd_epi32(sum, ones, _mm512_loadu_si512(qrow + b + 64));
        _mm512_storeu_si512(xq.init.data() + t * xq.is + l0, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-bias)));
      }
    }
    return xq;
  }
#endif
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
  for (int64_t t = 0; t < n; ++t) {
    int8_t* qrow = xq.q.data() + t * xq.qs;
    for (int64_t g = 0; g < G; ++g) {
      const float* xg = x + t * cols + g * kQuantGroup;
      float amax = 0;
      bool finite = true;
      for (int i = 0; i < kQuantGroup; ++i) {
        amax = std::max(amax, std::fabs(xg[i]));
        finite = finite && std::isfinite(xg[i]);
      }
      float d = amax / 127.0f;
      int8_t q[kQuantGroup] = {};
      if (!finite) {
        d = std::numeric_limits<float>::quiet_NaN();  // NaN / inf in x: this group's products become NaN
      } else if (amax > 0) {
        const float id = 127.0f / amax;
        for (int i = 0; i < kQuantGroup; ++i) q[i] = int8_t(std::clamp(std::nearbyint(xg[i] * id), -127.0f, 127.0f));
      }
      xq.d[size_t(t * xq.ds + g)] = d;
      for (int i = 0; i < kQuantGroup; ++i) {
        int64_t pos = g * kQuantGroup + i;
        if (four_bit && f == Family::kAvx2) pos = g * kQuantGroup + (i % 2) * 16 + i / 2;
        if (quads) pos = (g / 4) * 128 + (i % 2) * 64 + (g % 4) * 16 + i / 2;
        qrow[pos] = q[i];
      }
    }
    if (bias != 0)
      for (int64_t lane = 0; lane < xq.is; ++lane) {
        const int8_t* b = quads ? qrow + (lane / 16) * 128 + (lane % 16) * 4 : qrow + lane * 4;
        int32_t sum = int32_t(b[0]) + b[1] + b[2] + b[3];
        if (quads) sum += int32_t(b[64]) + b[65] + b[66] + b[67];
        xq.init[size_t(t * xq.is + lane)] = -bias * sum;
      }
  }
  return xq;
}
}  // namespace myriad::cpu::quant
