// The block formats' names and checks, and the dispatch of their product (ops/block_quant.h).
#include "ops/block_quant.h"

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/kernels.h"

namespace myriad {

const char* quant_type_name(QuantType t) {
  switch (t) {
    case QuantType::kQ8:
      return "q8";
    case QuantType::kQ4:
      return "q4";
    case QuantType::kMxfp4:
      return "mxfp4";
  }
  return "?";
}

QuantType parse_quant_type(std::string_view name) {
  if (name == "q8") return QuantType::kQ8;
  if (name == "q4") return QuantType::kQ4;
  if (name == "mxfp4") return QuantType::kMxfp4;
  throw_error(ErrorKind::kValue, "quantization type '", name, "': expected one of q8, q4, mxfp4");
}

double quant_bits_per_weight(QuantType t) {
  switch (t) {
    case QuantType::kQ8:
      return 8.0 + 16.0 / kQuantGroup;
    case QuantType::kQ4:
      return 4.0 + 16.0 / kQuantGroup;
    case QuantType::kMxfp4:
      return 4.0 + 8.0 / kQuantGroup;
  }
  return 0;
}

float e8m0_to_f32(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(e) - 127);
}

void check_quant_matrix(const QuantMatrix& q, const char* op) {
  MYRIAD_REQUIRE(q.rows >= 0 && q.cols > 0 && q.cols % kQuantGroup == 0, kShape, op, ": quantized matrix [", q.rows,
                 ", ", q.cols, "]: cols must be a positive multiple of ", kQuantGroup);
  const bool q8 = q.type == QuantType::kQ8;
  const int64_t code_cols = q8 ? q.cols : q.cols / 2, groups = q.cols / kQuantGroup;
  const DType scale_dtype = q.type == QuantType::kMxfp4 ? DType::kU8 : DType::kF16;
  const char* t = quant_type_name(q.type);
  MYRIAD_REQUIRE(q.codes.defined() && q.scales.defined(), kShape, op, ": ", t, " matrix without codes or scales");
  MYRIAD_REQUIRE(q.codes.device() == q.scales.device(), kShape, op, ": ", t, " codes on ",
                 device_name(q.codes.device()), " but scales on ", device_name(q.scales.device()));
  // Checked on every product (decode runs hundreds a token): compared in place, the shapes built only for a message.
  auto is_2d = [](const Tensor& x, int64_t r, int64_t c) {
    return x.ndim() == 2 && x.shape()[0] == r && x.shape()[1] == c && x.is_contiguous();
  };
  MYRIAD_REQUIRE(q.codes.dtype() == DType::kU8 && is_2d(q.codes, q.rows, code_cols), kShape, op, ": ", t,
                 " codes must be contiguous U8 ", shape_str({q.rows, code_cols}), ", got ", dtype_name(q.codes.dtype()),
                 " ", shape_str(q.codes.shape()));
  MYRIAD_REQUIRE(q.scales.dtype() == scale_dtype && is_2d(q.scales, q.rows, groups), kShape, op, ": ", t,
                 " scales must be contiguous ", dtype_name(scale_dtype), " ", shape_str({q.rows, groups}), ", got ",
                 dtype_name(q.scales.dtype()), " ", shape_str(q.scales.shape()));
}

namespace ops {

namespace {

// The kernel checks the rest (check_quant_matrix).
void check_on_device(Device device, const QuantMatrix& w, const char* op) {
  MYRIAD_REQUIRE(w.device() == device, kShape, op, ": a ", quant_type_name(w.type), " matrix on ",
                 device_name(w.device()), " given to the ", device_name(device), " kernel");
}

}  // namespace

void quant_matmul(Device device, const QuantMatrix& w, const float* x, int64_t n, float* y, QuantKernel kernel) {
  if (device != Device::kCPU) missing_kernel("quant_matmul", device);
  check_on_device(device, w, "quant_matmul");
  cpu::quant_matmul(w, x, n, y, kernel);
}

void quant_matmul_many(Device device, std::span<const QuantMatrix* const> ws, const float* x, int64_t n,
                       std::span<float* const> ys) {
  if (device != Device::kCPU) missing_kernel("quant_matmul_many", device);
  for (const QuantMatrix* w : ws)
    if (w != nullptr) check_on_device(device, *w, "quant_matmul_many");
  cpu::quant_matmul_many(ws, x, n, ys);
}

}  // namespace ops

}  // namespace myriad
