// What the autograd op files share (internal to src/autograd): device and dtype checks, raw pointers, outputs.
#pragma once

#include <initializer_list>

#include "autograd/tape.h"
#include "core/error.h"
#include "core/tensor.h"

namespace myriad::ag {

inline void require_cpu(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    MYRIAD_REQUIRE(!t->defined() || t->device() == Device::kCPU, kUnsupported, op,
                   ": no CUDA kernel yet for this op (tensor on ", device_name(t->device()), ")");
}

inline void require_f32(const char* op, const Tensor& t, const char* what) {
  MYRIAD_REQUIRE(t.dtype() == DType::kF32, kValue, op, ": ", what, " must be F32, got ", dtype_name(t.dtype()));
}

inline const float* cf(const Tensor& t) {
  return t.data<float>();
}
inline float* mf(Tensor& t) {
  return t.data<float>();
}

inline Var make_output(Tensor value, bool needs) {
  return Var(std::move(value), needs);
}

inline int64_t rows_of(const Shape& s) {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) r *= s[i];
  return r;
}

}  // namespace myriad::ag
