// One linear layer's weight for the inference paths: a dense f32 matrix (sgemm) or a block-quantized one
// (ops::quant_matmul, never dequantized as a whole). Either way apply() computes y = x W^T for W [rows = out,
// cols = in], so the decode code is written once for every storage format.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "quant/quant.h"

namespace myriad {

class LinearWeight {
 public:
  LinearWeight() = default;
  static LinearWeight dense(const Tensor& w);  // [out, in], any float dtype: converted to f32 contiguous
  static LinearWeight quantized(QuantMatrix q);

  bool defined() const { return rows_ > 0; }
  bool is_quantized() const { return quant_; }
  int64_t rows() const { return rows_; }             // outputs
  int64_t cols() const { return cols_; }             // inputs
  size_t bytes() const;                              // bytes one pass over the weight reads
  const Tensor& dense_weight() const { return w_; }  // undefined when quantized
  const QuantMatrix& quant_matrix() const { return q_; }

  // y[n, rows] (row stride ldy >= rows; ldy 0 means rows) = x[n, cols] . W^T; x contiguous rows.
  void apply(const float* x, int64_t n, float* y, int64_t ldy = 0) const;
  Tensor apply(const Tensor& x) const;  // x [n, cols] f32 -> [n, rows]
  // ys[m] [n, ws[m]->rows()] (contiguous) = x . ws[m]^T for several weights of one width read by the same x. When
  // all are quantized with one type, one quant_matmul_many (x quantized once, one parallel region); else each
  // apply() in turn. Same results as the separate applies.
  static void apply_many(std::span<const LinearWeight* const> ws, const float* x, int64_t n,
                         std::span<float* const> ys);

 private:
  bool quant_ = false;
  int64_t rows_ = 0, cols_ = 0;
  Tensor w_;
  QuantMatrix q_;
};

}  // namespace myriad
