// Reference elementwise ops: unary activations, broadcasting binary ops, SiTU-GLU. T = float or double.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/kernels.h"

namespace myriad::ref {

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// sqrt(2/pi) (x + 0.044715 x^3): the tanh approximation's argument
template <class T>
T gelu_tanh_arg(T x) {
  return std::sqrt(T(2) / T(M_PI)) * (x + T(0.044715) * x * x * x);
}

template <class T>
T unary_value(Unary op, T x) {
  switch (op) {
    case Unary::kSiLU:
      return x * sigmoid(x);
    case Unary::kSigmoid:
      return sigmoid(x);
    case Unary::kTanh:
      return std::tanh(x);
    case Unary::kSoftplus:
      return x > T(20) ? x : std::log1p(std::exp(x));
    case Unary::kGeluTanh:
      return T(0.5) * x * (T(1) + std::tanh(gelu_tanh_arg(x)));
    case Unary::kGelu:
      return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
  }
  return x;
}

template <class T>
T unary_derivative(Unary op, T x) {
  switch (op) {
    case Unary::kSiLU: {
      const T s = sigmoid(x);
      return s * (T(1) + x * (T(1) - s));
    }
    case Unary::kSigmoid:
      return sigmoid(x) * (T(1) - sigmoid(x));
    case Unary::kTanh:
      return T(1) - std::tanh(x) * std::tanh(x);
    case Unary::kSoftplus:
      return sigmoid(x);
    case Unary::kGeluTanh: {
      const T t = std::tanh(gelu_tanh_arg(x)), c = std::sqrt(T(2) / T(M_PI));
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x * x);
    }
    case Unary::kGelu: {
      const T phi = std::exp(-x * x / T(2)) / std::sqrt(T(2) * T(M_PI));
      return T(0.5) * (T(1) + std::erf(x / std::sqrt(T(2)))) + x * phi;
    }
  }
  return T(1);
}

template <class T>
void unary_forward(Unary op, T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = unary_value(op, x[i]);
}

template <class T>
void unary_backward(Unary op, T* dx, const T* dy, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * unary_derivative(op, x[i]);
}

template <class T>
void binary_forward(Binary op, T* out, const T* a, const int64_t* as, const T* b, const int64_t* bs,
                    const int64_t* shape, int ndim) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t c = rem % shape[d];
      rem /= shape[d];
      oa += c * as[d];
      ob += c * bs[d];
    }
    out[i] = op == Binary::kAdd ? a[oa] + b[ob] : a[oa] * b[ob];
  }
}

template <class T>
void broadcast_reduce_accumulate(T* g, const int64_t* gs, const T* d, const int64_t* shape, int ndim) {
  int64_t n = 1;
  for (int k = 0; k < ndim; ++k) n *= shape[k];
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, o = 0;
    for (int k = ndim - 1; k >= 0; --k) {
      o += (rem % shape[k]) * gs[k];
      rem /= shape[k];
    }
    g[o] += d[i];
  }
}

template <class T>
void copy_rows(T* dst, int64_t ldd, const T* src, int64_t lds, int64_t rows, int64_t cols, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) dst[r * ldd + j] = (accumulate ? dst[r * ldd + j] : T(0)) + src[r * lds + j];
}

// SiTU-GLU(g, u) = [b1 tanh(g/b1) sigmoid(g)] * [b2 tanh(u/b2)]  (docs/design.md §1.5).
template <class T>
void situ_glu_forward(T* y, int64_t ldy, const T* g, int64_t ldg, const T* u, int64_t ldu, int64_t rows, int64_t F,
                      SituParams p) {
  const T b1 = p.beta, b2 = p.linear_beta;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < F; ++j) {
      const T gv = g[r * ldg + j], uv = u[r * ldu + j];
      const T h = std::isinf(b2) ? uv : b2 * std::tanh(uv / b2);  // b2 infinite: no clamp
      y[r * ldy + j] = b1 * std::tanh(gv / b1) * sigmoid(gv) * h;
    }
}

template <class T>
void situ_glu_backward(T* dg, int64_t lddg, T* du, int64_t lddu, const T* dy, int64_t lddy, const T* g, int64_t ldg,
                       const T* u, int64_t ldu, int64_t rows, int64_t F, SituParams p) {
  const T b1 = p.beta, b2 = p.linear_beta;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < F; ++j) {
      const T gv = g[r * ldg + j], uv = u[r * ldu + j], d = dy[r * lddy + j];
      const T tg = std::tanh(gv / b1), s = sigmoid(gv);
      const T f = b1 * tg * s;
      const T fprime = (T(1) - tg * tg) * s + b1 * tg * s * (T(1) - s);
      const bool clamp = !std::isinf(b2);
      const T tu = clamp ? std::tanh(uv / b2) : T(0);
      const T h = clamp ? b2 * tu : uv, hprime = clamp ? T(1) - tu * tu : T(1);
      dg[r * lddg + j] += d * fprime * h;
      du[r * lddu + j] += d * f * hprime;
    }
}

template <class T>
void scale(T* y, const T* x, T alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

}  // namespace myriad::ref
