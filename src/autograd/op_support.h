// What the autograd op files share (internal to src/autograd): device and dtype checks, raw pointers, outputs.
#pragma once

#include <initializer_list>

#include "autograd/tape.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/kernels.h"

namespace myriad::ag {

// The device an op runs on: that of its (defined) tensors, which must all agree; its kernels are dispatched to
// that device (ops/kernels.h) and its outputs and gradients allocated there.
inline Device op_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!first) first = t;
    MYRIAD_REQUIRE(t->device() == first->device(), kValue, op, ": operands on different devices (",
                   device_name(first->device()), " and ", device_name(t->device()), ")");
  }
  return first ? first->device() : Device::kCPU;
}

// For ops whose host code reads tensor contents (token ids, indices, targets, a scalar) or whose kernels exist
// only on the CPU: the device, refused with the dispatcher's error (naming the op and the device) unless it is
// the CPU.
inline Device cpu_op_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Device d = op_device(op, ts);
  if (d != Device::kCPU) ops::missing_kernel(op, d);
  return d;
}

inline void require_f32(const char* op, const Tensor& t, const char* what) {
  MYRIAD_REQUIRE(t.dtype() == DType::kF32, kValue, op, ": ", what, " must be F32, got ", dtype_name(t.dtype()));
}

// The f32 buffer of a tensor on its own device (for kernels; host code reads through Tensor::data).
inline const float* cf(const Tensor& t) {
  MYRIAD_CHECK(t.dtype() == DType::kF32, "an f32 buffer of a ", dtype_name(t.dtype()), " tensor");
  return static_cast<const float*>(t.raw_data());
}
inline float* mf(Tensor& t) {
  MYRIAD_CHECK(t.dtype() == DType::kF32, "an f32 buffer of a ", dtype_name(t.dtype()), " tensor");
  return static_cast<float*>(t.raw_data());
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
