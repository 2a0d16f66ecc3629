// Weight-only block quantization for serving (DESIGN §3): int8 and int4 with a scale per group of 32 weights,
// and MXFP4 (OCP Microscaling: E2M1 values with an E8M0 power-of-two scale per 32, as K3 ships its routed
// experts). Matrices are quantized along their input dimension (a row of a [out, in] weight is cut into groups
// of 32 consecutive inputs) and used directly by quant_matmul, which never dequantizes a whole matrix.
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

namespace myriad {

class Checkpoint;

enum class QuantType : uint8_t { kQ8, kQ4, kMxfp4 };
inline constexpr int64_t kQuantGroup = 32;
inline constexpr const char* kQWeightSuffix = ".qweight";
inline constexpr const char* kQScaleSuffix = ".qscale";
inline constexpr const char* kQuantMetadataKey = "myriad.quant";

// E2M1 (FP4) value of each 4-bit code: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (code | 8).
inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

const char* quant_type_name(QuantType t);           // "q8", "q4", "mxfp4"
QuantType parse_quant_type(std::string_view name);  // kValue naming the accepted spellings
double quant_bits_per_weight(QuantType t);          // including the scales: 8.5, 4.5, 4.25
float e8m0_to_f32(uint8_t e);                       // 2^(e-127); NaN for e = 255

struct QuantMatrix {
  QuantType type = QuantType::kQ8;
  int64_t rows = 0, cols = 0;
  Tensor codes;   // as W.qweight
  Tensor scales;  // as W.qscale
  size_t bytes() const { return codes.nbytes() + scales.nbytes(); }
};

// Throws kShape (prefixed by `op`) unless q's codes and scales are cpu, contiguous, and of the dtypes and shapes
// above for q.type, rows and cols (cols a positive multiple of 32).
void check_quant_matrix(const QuantMatrix& q, const char* op);

// w: [rows, cols] f32 (or bf16/f16) cpu; cols % 32 == 0 (kShape otherwise, naming the shape).
QuantMatrix quantize(const Tensor& w, QuantType type);
// f32 [rows, cols]; for tests and the reference path only.
Tensor dequantize(const QuantMatrix& q);

// y[n, rows] = x[n, cols] . W^T for f32 row-major x and y (y overwritten). Threads over rows (OpenMP) when the
// work is large enough; AVX2 and AVX512-VNNI kernels, with a portable fallback.
//   NOTE (accuracy): below quant_gemm_rows() rows of x (decode, and prefill up to a few hundred tokens), x is itself
//   quantized per row and group of 32 to int8 with an f32 scale dx = max|x_g| / 127 (as llama.cpp's q8_0
//   activations), and each group's dot product is exact in int32; the result differs from x . dequantize(W)^T by
//   at most sum_g (dx_g / 2) sum_{i in g} |W_i| plus f32 rounding of the G scaled group sums. From
//   quant_gemm_rows() rows on, panels of W rows are dequantized to f32 in a buffer and multiplied with sgemm:
//   x stays exact.
void quant_matmul(const QuantMatrix& w, const float* x, int64_t n, float* y);
// ys[m][n, ws[m]->rows] = x . ws[m]^T for several matrices of one width and type (kShape otherwise) and the same x:
// equal to quant_matmul of each, with x quantized once and one parallel region over all their rows (decode runs
// several small products of one x per layer).
void quant_matmul_many(std::span<const QuantMatrix* const> ws, const float* x, int64_t n, std::span<float* const> ys);

// Which implementation quant_matmul uses; kAuto picks the best compiled-in integer kernel below quant_gemm_rows()
// rows of x and kDequantGemm from there. The others force one path (tests, benchmarks).
enum class QuantKernel : uint8_t { kAuto, kScalar, kAvx2, kAvx512Vnni, kDequantGemm };
// Crossovers measured on a 2-core AMD EPYC, [4096, 4096]: 256 with AVX512-VNNI, 128 with AVX2 only; 8 for the
// portable build (a guess: its scalar integer kernel is ~10x slower than the SIMD ones).
int64_t quant_gemm_rows();
const char* quant_kernel_name(QuantKernel k);  // "auto", "scalar", "avx2", "avx512vnni", "dequant+sgemm"
bool quant_kernel_available(QuantKernel k);    // compiled in (AVX2 needs __AVX2__, __FMA__ and __F16C__, ...)
// As above with a chosen kernel; kUnsupported when it is not available.
void quant_matmul(const QuantMatrix& w, const float* x, int64_t n, float* y, QuantKernel kernel);

// The quantized form of weight `name` in a checkpoint (name.qweight + name.qscale, type from the metadata), or
// nullopt when the checkpoint stores `name` unquantized. Throws kFormat naming the tensor for inconsistent
// shapes/dtypes, a missing partner tensor, `name` present beside its quantized form, or a missing / unknown type.
// The tensors are zero-copy views into the checkpoint's mapping.
std::optional<QuantMatrix> load_quant_matrix(const Checkpoint& ckpt, const std::string& name);

}  // namespace myriad
