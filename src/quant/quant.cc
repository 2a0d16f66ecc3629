// Block quantization of weight matrices (q8, q4, mxfp4): quantize / dequantize, and reading the quantized form of
// a weight from a checkpoint. The storage layout and the rules for choosing scales are in quant.h; the formats'
// names and checks and the matrix product are ops (ops/block_quant.h).
// Shapes: W [rows, cols] = [out, in], G = cols / 32 groups per row.
#include "quant/quant.h"

#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/threads.h"
#include "io/checkpoint.h"

namespace myriad {

namespace {

// Quantizing costs a few ns per weight; below this many weights a fork/join is not worth it.
constexpr int64_t kParallelWeights = int64_t(1) << 16;

// The smallest f16 whose magnitude is >= d (d > 0, finite). kValue when that exceeds the f16 range.
uint16_t f16_at_least(double d, const char* what) {
  uint16_t h = f32_to_f16(float(d));
  if (double(f16_to_f32(h)) < d) ++h;  // positive finite f16: the next bit pattern is the next larger value
  MYRIAD_REQUIRE((h & 0x7c00u) != 0x7c00u, kValue, "quantize: group scale ", d, " of ", what,
                 " exceeds the f16 range (weights above ~8e6 cannot be quantized)");
  return h;
}

// Nearest E2M1 code of v (already divided by the scale); ties go to the even code; saturates at +-6.
uint8_t e2m1_encode(double v) {
  const double a = std::fabs(v);
  uint8_t c;
  if (a <= 0.25)
    c = 0;
  else if (a < 0.75)
    c = 1;
  else if (a <= 1.25)
    c = 2;
  else if (a < 1.75)
    c = 3;
  else if (a <= 2.5)
    c = 4;
  else if (a < 3.5)
    c = 5;
  else if (a <= 5.0)
    c = 6;
  else
    c = 7;
  return (v < 0 && c != 0) ? uint8_t(c | 8u) : c;
}

// One group of 32 weights -> codes (one per weight, unpacked) and the stored scale bits.
void quantize_group_q8(const float* w, int8_t* q, uint16_t* scale) {
  double amax = 0;
  for (int i = 0; i < kQuantGroup; ++i) amax = std::max(amax, std::fabs(double(w[i])));
  if (amax == 0) {
    *scale = 0;
    std::memset(q, 0, kQuantGroup);
    return;
  }
  const uint16_t h = f16_at_least(amax / 127.0, "a q8 group");
  const double d = f16_to_f32(h);
  for (int i = 0; i < kQuantGroup; ++i) {
    const double v = std::nearbyint(double(w[i]) / d);
    q[i] = int8_t(std::clamp(v, -127.0, 127.0));
  }
  *scale = h;
}

void quantize_group_q4(const float* w, int8_t* q, uint16_t* scale) {
  double pos = 0, neg = 0;
  for (int i = 0; i < kQuantGroup; ++i) {
    const double v = w[i];
    if (v > pos) pos = v;
    if (-v > neg) neg = -v;
  }
  if (pos == 0 && neg == 0) {
    *scale = 0;
    std::memset(q, 0, kQuantGroup);
    return;
  }
  // d > 0: q = w / d covers [-8, 7] with the negative side on -8; d < 0 mirrors it.
  const double d_pos = std::max(neg / 8.0, pos / 7.0);
  const double d_neg = std::max(pos / 8.0, neg / 7.0);
  const bool negative = d_neg < d_pos;
  uint16_t h = f16_at_least(negative ? d_neg : d_pos, "a q4 group");
  if (negative) h |= 0x8000u;
  const double d = f16_to_f32(h);
  for (int i = 0; i < kQuantGroup; ++i) {
    const double v = std::nearbyint(double(w[i]) / d);
    q[i] = int8_t(std::clamp(v, -8.0, 7.0));
  }
  *scale = h;
}

void quantize_group_mxfp4(const float* w, uint8_t* codes, uint8_t* exponent) {
  double amax = 0;
  for (int i = 0; i < kQuantGroup; ++i) amax = std::max(amax, std::fabs(double(w[i])));
  if (amax == 0) {
    *exponent = 127;
    std::memset(codes, 0, kQuantGroup);
    return;
  }
  int e2 = 0;
  std::frexp(amax, &e2);               // amax = m 2^e2, m in [0.5, 1): floor(log2 amax) = e2 - 1
  const int e_ocp = e2 - 1 - 2 + 127;  // E2M1's largest power is 2^2
  double best_err = std::numeric_limits<double>::infinity();
  int best_e = 0;
  for (int e = e_ocp; e <= e_ocp + 1; ++e) {
    const int ec = std::clamp(e, 0, 254);
    const double s = std::ldexp(1.0, ec - 127);
    double err = 0;
    for (int i = 0; i < kQuantGroup; ++i) {
      const double dq = s * kE2M1Values[e2m1_encode(double(w[i]) / s)];
      err += (dq - w[i]) * (dq - w[i]);
    }
    if (err < best_err) {
      best_err = err;
      best_e = ec;
    }
  }
  const double s = std::ldexp(1.0, best_e - 127);
  for (int i = 0; i < kQuantGroup; ++i) codes[i] = e2m1_encode(double(w[i]) / s);
  *exponent = uint8_t(best_e);
}

}  // namespace

QuantMatrix quantize(const Tensor& w, QuantType type) {
  MYRIAD_REQUIRE(w.defined() && w.ndim() == 2, kShape, "quantize: expected a 2-D [rows, cols] matrix, got ",
                 w.defined() ? shape_str(w.shape()) : std::string("an undefined tensor"));
  MYRIAD_REQUIRE(w.device() == Device::kCPU, kUnsupported, "quantize: the matrix must be on the cpu");
  MYRIAD_REQUIRE(w.dtype() == DType::kF32 || w.dtype() == DType::kBF16 || w.dtype() == DType::kF16, kValue,
                 "quantize: expected an f32, bf16 or f16 matrix, got ", dtype_name(w.dtype()));
  const int64_t rows = w.size(0), cols = w.size(1);
  MYRIAD_REQUIRE(cols > 0 && cols % kQuantGroup == 0, kShape, "quantize: matrix ", shape_str(w.shape()),
                 ": cols must be a positive multiple of ", kQuantGroup);
  const Tensor wf = (w.dtype() == DType::kF32 ? w : w.to(DType::kF32)).contiguous();
  const float* src = wf.data<float>();

  QuantMatrix q;
  q.type = type;
  q.rows = rows;
  q.cols = cols;
  const int64_t groups = cols / kQuantGroup;
  const bool q8 = type == QuantType::kQ8;
  q.codes = Tensor::empty({rows, q8 ? cols : cols / 2}, DType::kU8);
  q.scales = Tensor::empty({rows, groups}, type == QuantType::kMxfp4 ? DType::kU8 : DType::kF16);
  uint8_t* codes = q.codes.data<uint8_t>();

  // Non-finite weights are found first (an exception must not leave an OpenMP region).
  std::atomic<int64_t> bad{-1};
  const bool par = rows * cols >= kParallelWeights && num_threads() > 1 && !omp_in_parallel();
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (par)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = src + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(row[c])) {
        int64_t expected = -1;
        bad.compare_exchange_strong(expected, r * cols + c);
        break;
      }
    }
  }
  if (const int64_t b = bad.load(); b >= 0)
    throw_error(ErrorKind::kValue, "quantize: matrix ", shape_str(w.shape()), " holds a non-finite weight (", src[b],
                ") at [", b / cols, ", ", b % cols, "]");

  // Scales can overflow f16 (kValue); report the first such group after the loop.
  std::atomic<int64_t> overflow{-1};
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (par)
  for (int64_t r = 0; r < rows; ++r) {
    int8_t qs[kQuantGroup];
    uint8_t nib[kQuantGroup];
    for (int64_t g = 0; g < groups; ++g) {
      const float* wg = src + r * cols + g * kQuantGroup;
      try {
        if (type == QuantType::kMxfp4) {
          quantize_group_mxfp4(wg, nib, q.scales.data<uint8_t>() + r * groups + g);
          uint8_t* out = codes + r * (cols / 2) + g * (kQuantGroup / 2);
          for (int i = 0; i < kQuantGroup / 2; ++i) out[i] = uint8_t(nib[2 * i] | (nib[2 * i + 1] << 4));
        } else if (type == QuantType::kQ4) {
          quantize_group_q4(wg, qs, q.scales.data<uint16_t>() + r * groups + g);
          uint8_t* out = codes + r * (cols / 2) + g * (kQuantGroup / 2);
          for (int i = 0; i < kQuantGroup / 2; ++i)
            out[i] = uint8_t(uint8_t(qs[2 * i] + 8) | (uint8_t(qs[2 * i + 1] + 8) << 4));
        } else {
          quantize_group_q8(wg, qs, q.scales.data<uint16_t>() + r * groups + g);
          std::memcpy(codes + r * cols + g * kQuantGroup, qs, kQuantGroup);
        }
      } catch (const Error&) {
        int64_t expected = -1;
        overflow.compare_exchange_strong(expected, r * groups + g);
      }
    }
  }
  if (const int64_t o = overflow.load(); o >= 0)
    throw_error(ErrorKind::kValue, "quantize: matrix ", shape_str(w.shape()), ", row ", o / groups, ", group ",
                o % groups, ": the group's scale exceeds the f16 range (weights above ~8e6 cannot be quantized)");
  return q;
}

Tensor dequantize(const QuantMatrix& q) {
  check_quant_matrix(q, "dequantize");
  const int64_t rows = q.rows, cols = q.cols, groups = cols / kQuantGroup;
  Tensor out = Tensor::empty({rows, cols});
  float* dst = out.data<float>();
  const uint8_t* codes = q.codes.data<uint8_t>();
  const bool par = rows * cols >= kParallelWeights && num_threads() > 1 && !omp_in_parallel();
#pragma omp parallel for schedule(static) num_threads(num_threads()) if (par)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      float* o = dst + r * cols + g * kQuantGroup;
      if (q.type == QuantType::kQ8) {
        const float d = f16_to_f32(q.scales.data<uint16_t>()[r * groups + g]);
        const uint8_t* c = codes + r * cols + g * kQuantGroup;
        for (int i = 0; i < kQuantGroup; ++i) o[i] = d * float(int8_t(c[i]));
      } else {
        const uint8_t* c = codes + r * (cols / 2) + g * (kQuantGroup / 2);
        const bool q4 = q.type == QuantType::kQ4;
        const float d = q4 ? f16_to_f32(q.scales.data<uint16_t>()[r * groups + g])
                           : e8m0_to_f32(q.scales.data<uint8_t>()[r * groups + g]);
        for (int i = 0; i < kQuantGroup / 2; ++i) {
          const int lo = c[i] & 0xf, hi = c[i] >> 4;
          o[2 * i] = q4 ? d * float(lo - 8) : d * kE2M1Values[lo];
          o[2 * i + 1] = q4 ? d * float(hi - 8) : d * kE2M1Values[hi];
        }
      }
    }
  }
  return out;
}

std::optional<QuantMatrix> load_quant_matrix(const Checkpoint& ckpt, const std::string& name) {
  const std::string qw = name + kQWeightSuffix, qs = name + kQScaleSuffix;
  const bool has_w = ckpt.contains(qw), has_s = ckpt.contains(qs);
  if (!has_w && !has_s) return std::nullopt;
  const std::string& path = ckpt.path();
  MYRIAD_REQUIRE(has_w, kFormat, path, ": tensor ", qs, " has no partner ", qw);
  MYRIAD_REQUIRE(has_s, kFormat, path, ": tensor ", qw, " has no partner ", qs);
  MYRIAD_REQUIRE(!ckpt.contains(name), kFormat, path, ": tensor ", name, " is stored both unquantized and as ", qw);
  const auto it = ckpt.metadata().find(kQuantMetadataKey);
  MYRIAD_REQUIRE(it != ckpt.metadata().end(), kFormat, path, ": tensor ", qw,
                 " is quantized but the metadata has no \"", kQuantMetadataKey, "\" type");
  QuantType type;
  try {
    type = parse_quant_type(it->second);
  } catch (const Error& e) {
    throw_error(ErrorKind::kFormat, path, ": metadata \"", kQuantMetadataKey, "\" of ", qw, ": ", e.what());
  }
  const char* t = quant_type_name(type);
  const Shape& ws = ckpt.shape(qw);
  const Shape& ss = ckpt.shape(qs);
  MYRIAD_REQUIRE(ckpt.dtype(qw) == DType::kU8 && ws.size() == 2, kFormat, path, ": tensor ", qw, " (", t,
                 ") must be a 2-D U8 tensor, got ", dtype_name(ckpt.dtype(qw)), " ", shape_str(ws));
  const int64_t rows = ws[0];
  const int64_t cols = type == QuantType::kQ8 ? ws[1] : 2 * ws[1];
  MYRIAD_REQUIRE(cols > 0 && cols % kQuantGroup == 0, kFormat, path, ": tensor ", qw, " (", t, ") ", shape_str(ws),
                 " gives ", cols, " columns, not a positive multiple of ", kQuantGroup);
  const DType sd = type == QuantType::kMxfp4 ? DType::kU8 : DType::kF16;
  const Shape want_s = {rows, cols / kQuantGroup};
  MYRIAD_REQUIRE(ckpt.dtype(qs) == sd && ss == want_s, kFormat, path, ": tensor ", qs, " (", t, ") must be ",
                 dtype_name(sd), " ", shape_str(want_s), " to match ", qw, " ", shape_str(ws), ", got ",
                 dtype_name(ckpt.dtype(qs)), " ", shape_str(ss));
  QuantMatrix q;
  q.type = type;
  q.rows = rows;
  q.cols = cols;
  q.codes = ckpt.tensor(qw);
  q.scales = ckpt.tensor(qs);
  check_quant_matrix(q, "load_quant_matrix");
  return q;
}

}  // namespace myriad
