// The pieces the integer kernels of quant_matmul share (ops/cpu/quant_matmul.cc: the row-strip kernels of decode;
// ops/cpu/quant_gemm_vnni.cc: the packed int8 GEMM of prefill): the 4-bit code tables, the bias that makes W's
// operand unsigned, W's scales as f32, and x quantized per group of 32 to int8. Internal to ops/cpu.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/block_quant.h"

#if defined(__AVX2__) || defined(__F16C__)
// NOTE: GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (_mm512_undefined_ps), which
// -Wmaybe-uninitialized reports wherever such an intrinsic is inlined; silenced for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MYRIAD_QUANT_AVX2 1
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__)
#define MYRIAD_QUANT_AVX512VNNI 1
#endif

namespace myriad::cpu::quant {

// 4-bit code -> integer weight value. Signed (the scalar kernel and the dequantizer): q4 code - 8, mxfp4 2 * e2m1
// (an exact integer in [-12, 12]; the scale is halved to match). Unsigned, for the SIMD kernels, whose W operand is
// u8: the signed value plus kBias (q4: the code itself; mxfp4: 2 * e2m1 + 12 in [0, 24]; q8: w + 128 = w ^ 0x80).
alignas(16) constexpr int8_t kQ4Lut[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
alignas(16) constexpr int8_t kMxfp4Lut[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
alignas(16) constexpr uint8_t kMxfp4ULut[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

template <QuantType T>
constexpr const int8_t* lut4() {
  return T == QuantType::kQ4 ? kQ4Lut : kMxfp4Lut;
}

template <QuantType T>
constexpr int64_t kCodeBytes = T == QuantType::kQ8 ? kQuantGroup : kQuantGroup / 2;  // per group

// Kernel families of the integer path.
enum class Family : uint8_t { kScalar, kAvx2, kVnni };

// Bias b of the unsigned W operand (u = w + b): the kernel computes sum u x exactly, and the -b sum x part is the
// accumulator's starting value, precomputed once per x row (XQuant::init). 0: W is used signed (scalar; AVX2 q8,
// whose maddubs would saturate on u8 w + 128 and uses |w| x sign(x, w) instead).
template <Family F, QuantType T>
constexpr int32_t kBias = F == Family::kScalar  ? 0
                          : T == QuantType::kQ8 ? (F == Family::kVnni ? 128 : 0)
                          : T == QuantType::kQ4 ? 8
                                                : 12;

// 0.5 * 2^(e-127) (mxfp4's codes are doubled), NaN for e = 255.
inline float half_e8m0(uint8_t e) {
  if (e >= 2 && e != 255) {
    const uint32_t bits = uint32_t(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return 0.5f * e8m0_to_f32(e);
}

// Scale of each group of W rows [r0, r0 + nr) in f32, times dx[g] when dx is given -> out[r * stride + g];

// mxfp4's halved (doubled codes).
void load_scales(const QuantMatrix& w, int64_t r0, int64_t nr, float* out, int64_t stride, const float* dx);

// Groups of 32 that one VNNI step covers (64 bytes of x): q8 two (64 codes), 4-bit four (64 bytes of codes; their
// low nibbles and their high nibbles each meet 64 bytes of x, two vpdpbusd into one accumulator).
template <QuantType T>
constexpr int64_t kVnniStepGroups = T == QuantType::kQ8 ? 2 : 4;

// x quantized for one kernel family. Per row t:
//   q     [Gp * 32]  int8 in the order the family's W decoding produces (below); Gp = G, or for VNNI G rounded up to
//                    a whole step (kVnniStepGroups), the extra groups zero
//   init  [is]       -bias * (sum of the stored bytes each 32-bit lane of the integer sums reads): the exact
//                    correction of u = w + bias. Lane l of step s covers the stored bytes 4l..4l+3 of the step's
//                    64 (q8) or those and the same of its second 64 (4-bit VNNI): 8 lanes per group for q8 and
//                    4-bit AVX2, 4 per group for 4-bit VNNI
//   d     [Gp + 16]  dx per group (zero past G: padding for 64-byte loads)
// Stored position of column i of group g:
//   natural                  g * 32 + i                                  (scalar; q8 on AVX2 and VNNI)
//   AVX2, 4-bit              g * 32 + (i odd ? 16 : 0) + i / 2           (low nibbles, then high nibbles)
//   VNNI, 4-bit (step s=g/4) s * 128 + (i odd ? 64 : 0) + (g % 4) * 16 + i / 2
//                            (the step's 64 code bytes are groups g..g+3 in order, 16 bytes each: a low nibble
//                            of byte j meets stored byte j, a high nibble stored byte 64 + j)
struct XQuant {
  int64_t Gp = 0, qs = 0, is = 0, ds = 0;  // groups stored; row strides of q, init, d
  std::vector<int8_t> q;
  std::vector<int32_t> init;
  std::vector<float> d;
};

// Into a per-thread XQuant that keeps its buffers from call to call (decode quantizes x for every product).
const XQuant& quantize_x(const float* x, int64_t n, int64_t cols, Family f, QuantType type, int32_t bias);

// y[n, rows] = x . W^T by the packed int8 GEMM (AVX512-VNNI builds only; ops/cpu/quant_gemm_vnni.cc): W is repacked
// panel by panel so that one vpdpbusd serves 16 W rows, and x is quantized as for the integer kernels.
void vnni_quant_gemm(const QuantMatrix& w, const float* x, int64_t n, float* y);

}  // namespace myriad::cpu::quant
