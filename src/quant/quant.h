// Weight-only block quantization for serving (docs/design.md §3): int8 and int4 with a scale per group of 32 weights,
// and MXFP4 (OCP Microscaling: E2M1 values with an E8M0 power-of-two scale per 32, as K3 ships its routed
// experts). Matrices are quantized along their input dimension (a row of a [out, in] weight is cut into groups
// of 32 consecutive inputs) and used directly by ops::quant_matmul (ops/block_quant.h: the formats as the
// kernels see them), which never dequantizes a whole matrix.
//
// Storage in safetensors, beside the f32 tensors of the same checkpoint, for a weight named W ("....weight"):
//   W.qweight  U8 [rows, cols]     q8: one int8 per weight (two's complement bit pattern), q in [-127, 127]
//              U8 [rows, cols/2]   q4, mxfp4: two 4-bit codes per byte, the even column in the low nibble
//   W.qscale   F16 [rows, cols/32] q8, q4: the group's scale d (weight = d * q)
//              U8  [rows, cols/32] mxfp4: the E8M0 exponent e (weight = 2^(e-127) * e2m1(code))
// and the file's metadata holds "myriad.quant" = "q8" | "q4" | "mxfp4" (one type per checkpoint). W itself is
// then absent. cols must be a multiple of 32.
//   q4 codes are offset binary: q = code - 8, q in [-8, 7]; d may be negative (see below).
//   mxfp4 codes are E2M1 (bit 3 sign, bits 2..1 exponent, bit 0 mantissa; kE2M1Values); e = 255 decodes NaN.
//
// How quantize chooses (every choice is deterministic and documented, so a test can check it):
//   q8     d = max|w| / 127 rounded to f16, then raised by one f16 step if rounding made it smaller, so that
//          |w / d| <= 127 and q = round_half_even(w / d) never clips: |w - d q| <= |d| / 2 for every weight.
//   q4     the asymmetric range [-8, 7] is used by both signs of d: d > 0 represents [-8|d|, 7|d|], d < 0
//          represents [-7|d|, 8|d|]. |d| = the smaller of max(neg/8, pos/7) and max(pos/8, neg/7) (pos, neg: the
//          largest positive weight and the largest |negative| weight of the group), rounded up to f16 as for q8;
//          again |w - d q| <= |d| / 2 with no clipping.
//   mxfp4  two candidate exponents: OCP's e = floor(log2 max|w|) - 2 (values above 6 * 2^(e-127) saturate to
//          +-6) and e + 1 (no saturation, half the resolution); the one with the smaller squared error of the
//          group wins (ties: OCP's). Each weight then gets the nearest E2M1 value of its scale (ties to the even
//          code, saturating at +-6).
//   All-zero groups store d = 0 (e = 127) and zero codes. Non-finite weights are rejected (kValue).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.h"
#include "ops/block_quant.h"

namespace myriad {

class Checkpoint;

inline constexpr const char* kQWeightSuffix = ".qweight";
inline constexpr const char* kQScaleSuffix = ".qscale";
inline constexpr const char* kQuantMetadataKey = "myriad.quant";

// w: [rows, cols] f32 (or bf16/f16) cpu; cols % 32 == 0 (kShape otherwise, naming the shape).
QuantMatrix quantize(const Tensor& w, QuantType type);
// f32 [rows, cols]; for tests and the reference path only.
Tensor dequantize(const QuantMatrix& q);

// The quantized form of weight `name` in a checkpoint (name.qweight + name.qscale, type from the metadata), or
// nullopt when the checkpoint stores `name` unquantized. Throws kFormat naming the tensor for inconsistent
// shapes/dtypes, a missing partner tensor, `name` present beside its quantized form, or a missing / unknown type.
// The tensors are zero-copy views into the checkpoint's mapping.
std::optional<QuantMatrix> load_quant_matrix(const Checkpoint& ckpt, const std::string& name);

}  // namespace myriad
