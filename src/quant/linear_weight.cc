#include "quant/linear_weight.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/kernels.h"

namespace myriad {

namespace {

// Up to this many rows of x, dense products go through cpu::gemm_skinny (decode batches): sgemm would pack
// (copy) the whole weight on every call, doubling the memory traffic of a step that is memory-bound already.
constexpr int64_t kSkinnyRows = 16;

}  // namespace

LinearWeight LinearWeight::dense(const Tensor& w) {
  MYRIAD_REQUIRE(w.defined() && w.ndim() == 2 && w.device() == Device::kCPU, kShape,
                 "linear weight: expected a 2-D cpu tensor, got ", w.defined() ? shape_str(w.shape()) : "undefined");
  LinearWeight l;
  Tensor f = w.dtype() == DType::kF32 ? w : w.to(DType::kF32);
  l.w_ = f.is_contiguous() ? f : f.contiguous();
  l.rows_ = w.shape()[0];
  l.cols_ = w.shape()[1];
  return l;
}

LinearWeight LinearWeight::quantized(QuantMatrix q) {
  LinearWeight l;
  l.quant_ = true;
  l.rows_ = q.rows;
  l.cols_ = q.cols;
  l.q_ = std::move(q);
  return l;
}

size_t LinearWeight::bytes() const {
  return quant_ ? q_.bytes() : w_.nbytes();
}

void LinearWeight::apply(const float* x, int64_t n, float* y, int64_t ldy) const {
  MYRIAD_CHECK(defined(), "linear weight: apply on an undefined weight");
  if (ldy == 0) ldy = rows_;
  if (n == 0) return;
  if (!quant_) {
    if (n <= kSkinnyRows)
      ops::gemm_skinny(w_.device(), n, rows_, cols_, x, w_.data<float>(), y, ldy);
    else
      ops::gemm(w_.device(), false, true, n, rows_, cols_, 1.0f, x, cols_, w_.data<float>(), cols_, 0.0f, y, ldy);
    return;
  }
  if (ldy == rows_) {
    ops::quant_matmul(q_.device(), q_, x, n, y);
    return;
  }
  std::vector<float> tmp(static_cast<size_t>(n * rows_));
  ops::quant_matmul(q_.device(), q_, x, n, tmp.data());
  for (int64_t i = 0; i < n; ++i) std::memcpy(y + i * ldy, tmp.data() + i * rows_, size_t(rows_) * sizeof(float));
}

void LinearWeight::apply_many(std::span<const LinearWeight* const> ws, const float* x, int64_t n,
                              std::span<float* const> ys) {
  MYRIAD_REQUIRE(ws.size() == ys.size(), kValue, "linear weight: apply_many with ", ws.size(), " weights and ",
                 ys.size(), " outputs");
  bool one_type = !ws.empty();
  for (const LinearWeight* w : ws) {
    MYRIAD_CHECK(w != nullptr && w->defined(), "linear weight: apply_many on an undefined weight");
    MYRIAD_REQUIRE(w->cols() == ws[0]->cols(), kShape, "linear weight: apply_many over widths ", ws[0]->cols(), " and ",
                   w->cols());
    one_type = one_type && w->quant_ && ws[0]->quant_ && w->q_.type == ws[0]->q_.type;
  }
  if (!one_type) {
    for (size_t m = 0; m < ws.size(); ++m) ws[m]->apply(x, n, ys[m]);
    return;
  }
  thread_local std::vector<const QuantMatrix*> qs;
  qs.clear();
  for (const LinearWeight* w : ws) qs.push_back(&w->q_);
  ops::quant_matmul_many(ws[0]->q_.device(), qs, x, n, ys);
}

Tensor LinearWeight::apply(const Tensor& x_in) const {
  MYRIAD_REQUIRE(x_in.ndim() == 2 && x_in.shape()[1] == cols_ && x_in.dtype() == DType::kF32, kShape,
                 "linear weight: input ", shape_str(x_in.shape()), " should be f32 [n, ", cols_, "]");
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({x.shape()[0], rows_});
  apply(x.data<float>(), x.shape()[0], y.data<float>());
  return y;
}

}  // namespace myriad
