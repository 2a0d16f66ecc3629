// Block-quantized weight matrices (q8, q4, MXFP4) as the kernel table sees them, and their product, dispatched like
// every op (ops/kernels.h); the CPU kernels are in ops/cpu/quant_matmul.cc. How the formats are stored in a
// checkpoint and how quantize() chooses the scales: quant/quant.h.
//
// A matrix W [rows, cols] is cut along its input dimension into groups of 32 consecutive weights of a row:
//   codes   U8 [rows, cols]     q8: one int8 per weight (two's complement bit pattern), q in [-127, 127]
//           U8 [rows, cols/2]   q4, mxfp4: two 4-bit codes per byte, the even column in the low nibble
//   scales  F16 [rows, cols/32] q8, q4: the group's scale d (weight = d * q); q4 codes are offset binary, q = code - 8
//           U8  [rows, cols/32] mxfp4: the E8M0 exponent e (weight = 2^(e-127) * e2m1(code)); e = 255 decodes NaN
// cols is a positive multiple of 32.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/tensor.h"

namespace myriad {

enum class QuantType : uint8_t { kQ8, kQ4, kMxfp4 };
inline constexpr int64_t kQuantGroup = 32;

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
  Tensor codes;   // as above (W.qweight in a checkpoint)
  Tensor scales;  // as above (W.qscale)
  Device device() const { return codes.device(); }
  size_t bytes() const { return codes.nbytes() + scales.nbytes(); }
};

// Throws kShape (prefixed by `op`) unless q's codes and scales are on one device, contiguous, and of the dtypes and
// shapes above for q.type, rows and cols (cols a positive multiple of 32).
void check_quant_matrix(const QuantMatrix& q, const char* op);

// Which CPU implementation quant_matmul uses. kAuto: the row-strip integer kernel of the best compiled-in family
// below quant_gemm_rows() rows of x, and from there the GEMM-shaped path: the packed int8 GEMM where the build has
// AVX512-VNNI (x quantized as below), dequant + sgemm elsewhere (x exact). The others force one path (tests,
// benchmarks).
enum class QuantKernel : uint8_t { kAuto, kScalar, kAvx2, kAvx512Vnni, kAvx512VnniGemm, kDequantGemm };
// Crossovers, measured: 2-core Intel Xeon (model 207, AVX512-VNNI), [4096, 4096]: 16 rows to the packed int8 GEMM;
// 2-core AMD EPYC with AVX2 only: 128 to dequant + sgemm; 8 for the portable build (a guess: its scalar integer
// kernel is ~10x slower than the SIMD ones).
int64_t quant_gemm_rows();  // of the CPU kernels
// Whether kAuto uses x exactly (unquantized) from quant_gemm_rows() rows on: false where the int8 GEMM runs.
bool quant_gemm_exact_x();
// "auto", "scalar", "avx2", "avx512vnni", "avx512vnni-gemm", "dequant+sgemm"
const char* quant_kernel_name(QuantKernel k);
bool quant_kernel_available(QuantKernel k);  // on the CPU: compiled in (AVX2 needs __AVX2__, __FMA__ and __F16C__, ...)

namespace ops {

// y[n, rows] = x[n, cols] . W^T for f32 row-major x and y (y overwritten). Threads over rows (OpenMP) when the
// work is large enough; AVX2 and AVX512-VNNI kernels, with a portable fallback.
//   NOTE (accuracy): on the integer paths (below quant_gemm_rows() rows of x, and on every row count where the
//   packed int8 GEMM runs: quant_gemm_exact_x() false), x is itself quantized per row and group of 32 to int8 with an
//   f32 scale dx = max|x_g| / 127 (as llama.cpp's q8_0 activations), and each group's dot product is exact in int32;
//   the result differs from x . dequantize(W)^T by at most sum_g (dx_g / 2) sum_{i in g} |W_i| plus f32 rounding of the
//   G scaled group sums. On the dequant + sgemm path, panels of W rows are dequantized to f32 in a buffer and
//   multiplied with sgemm: x stays exact.
// `kernel` forces one CPU implementation (tests, benchmarks; kUnsupported when it is not compiled in). The
// device is w's (codes and scales); x and y are buffers of that device.
void quant_matmul(Device device, const QuantMatrix& w, const float* x, int64_t n, float* y,
                  QuantKernel kernel = QuantKernel::kAuto);
// ys[m][n, ws[m]->rows] = x . ws[m]^T for several matrices of one width and type (kShape otherwise) and the same x:
// equal to quant_matmul of each, with x quantized once and one parallel region over all their rows (decode runs
// several small products of one x per layer).
void quant_matmul_many(Device device, std::span<const QuantMatrix* const> ws, const float* x, int64_t n,
                       std::span<float* const> ys);

}  // namespace ops

}  // namespace myriad
