// Elementwise CPU kernels: activations, broadcasting add/mul, SiTU-GLU. Vectorised through vmath.h and
// `omp simd`; threaded over large arrays.
#include <algorithm>
#include <cmath>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/fast_math.h"

namespace myriad::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;  // elements per thread chunk below which threading does not pay
constexpr float kSqrt2OverPi = 0.7978845608028654f, kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f, kInvSqrt2Pi = 0.3989422804014327f;

inline float gelu_tanh_arg(float x) {
  return kSqrt2OverPi * (x + kGeluCubic * x * x * x);
}
}  // namespace

void unary_forward(Unary op, float* y, const float* x, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    switch (op) {
      case Unary::kSiLU:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = x[i] * fast_sigmoid(x[i]);
        break;
      case Unary::kSigmoid:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = fast_sigmoid(x[i]);
        break;
      case Unary::kTanh:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = fast_tanh(x[i]);
        break;
      case Unary::kSoftplus:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = fast_softplus(x[i]);
        break;
      case Unary::kGeluTanh:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = 0.5f * x[i] * (1.0f + fast_tanh(gelu_tanh_arg(x[i])));
        break;
      case Unary::kGelu:
        for (int64_t i = b; i < e; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
        break;
    }
  });
}

void unary_backward(Unary op, float* dx, const float* dy, const float* x, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    switch (op) {
      case Unary::kSiLU:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) {
          const float s = fast_sigmoid(x[i]);
          dx[i] += dy[i] * s * (1.0f + x[i] * (1.0f - s));
        }
        break;
      case Unary::kSigmoid:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) {
          const float s = fast_sigmoid(x[i]);
          dx[i] += dy[i] * s * (1.0f - s);
        }
        break;
      case Unary::kTanh:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) {
          const float t = fast_tanh(x[i]);
          dx[i] += dy[i] * (1.0f - t * t);
        }
        break;
      case Unary::kSoftplus:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) dx[i] += dy[i] * fast_sigmoid(x[i]);
        break;
      case Unary::kGeluTanh:
#pragma omp simd
        for (int64_t i = b; i < e; ++i) {
          const float t = fast_tanh(gelu_tanh_arg(x[i]));
          const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x[i] * x[i]);
          dx[i] += dy[i] * (0.5f * (1.0f + t) + 0.5f * x[i] * (1.0f - t * t) * du);
        }
        break;
      case Unary::kGelu:
        for (int64_t i = b; i < e; ++i) {
          const float cdf = 0.5f * (1.0f + std::erf(x[i] * kInvSqrt2));
          const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
          dx[i] += dy[i] * (cdf + x[i] * pdf);
        }
        break;
    }
  });
}

void binary_forward(Binary op, float* out, const float* a, const int64_t* as, const float* b, const int64_t* bs,
                    const int64_t* shape, int ndim) {
  if (ndim == 0) {
    out[0] = op == Binary::kAdd ? a[0] + b[0] : a[0] * b[0];
    return;
  }
  int64_t rows = 1;
  for (int d = 0; d < ndim - 1; ++d) rows *= shape[d];
  const int64_t N = shape[ndim - 1];
  const int64_t sa = as[ndim - 1], sb = bs[ndim - 1];
  if (rows * N == 0) return;
  // Row-wise: the innermost axis is a contiguous or broadcast (stride 0) run; outer axes are decoded once per row.
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(N, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, oa = 0, ob = 0;
      for (int d = ndim - 2; d >= 0; --d) {
        const int64_t c = rem % shape[d];
        rem /= shape[d];
        oa += c * as[d];
        ob += c * bs[d];
      }
      const float* ar = a + oa;
      const float* br = b + ob;
      float* o = out + r * N;
      if (op == Binary::kAdd) {
        if (sa == 1 && sb == 1) {
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) o[j] = ar[j] + br[j];
        } else {
          for (int64_t j = 0; j < N; ++j) o[j] = ar[j * sa] + br[j * sb];
        }
      } else {
        if (sa == 1 && sb == 1) {
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) o[j] = ar[j] * br[j];
        } else {
          for (int64_t j = 0; j < N; ++j) o[j] = ar[j * sa] * br[j * sb];
        }
      }
    }
  });
}

void scale(float* y, const float* x, float alpha, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = alpha * x[i];
  });
}

void axpy(float* y, const float* x, float alpha, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] += alpha * x[i];
  });
}

void broadcast_reduce_accumulate(float* g, const int64_t* g_strides, const float* d, const int64_t* shape, int ndim) {
  int64_t n = 1;
  for (int k = 0; k < ndim; ++k) n *= shape[k];
  // One thread: several elements of d land on one element of g.
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, o = 0;
    for (int k = ndim - 1; k >= 0; --k) {
      o += (rem % shape[k]) * g_strides[k];
      rem /= shape[k];
    }
    g[o] += d[i];
  }
}

void copy_rows(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols, bool accumulate) {
  if (cols <= 0) return;
  parallel_for(rows, std::max<int64_t>(1, kGrain / cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* o = dst + r * ldd;
      const float* x = src + r * lds;
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) o[j] += x[j];
      } else {
        std::copy(x, x + cols, o);
      }
    }
  });
}

void situ_glu_forward(float* y, int64_t ldy, const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t rows,
                      int64_t F, SituParams p) {
  const float b1 = p.beta, ib1 = 1.0f / p.beta, b2 = p.linear_beta, ib2 = 1.0f / p.linear_beta;
  const bool clamp_u = !std::isinf(b2);
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(F, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* gr = g + r * ldg;
      const float* ur = u + r * ldu;
      float* yr = y + r * ldy;
      if (clamp_u) {
#pragma omp simd
        for (int64_t j = 0; j < F; ++j)
          yr[j] = b1 * fast_tanh(gr[j] * ib1) * fast_sigmoid(gr[j]) * (b2 * fast_tanh(ur[j] * ib2));
      } else {
#pragma omp simd
        for (int64_t j = 0; j < F; ++j) yr[j] = b1 * fast_tanh(gr[j] * ib1) * fast_sigmoid(gr[j]) * ur[j];
      }
    }
  });
}

void situ_glu_backward(float* dg, int64_t lddg, float* du, int64_t lddu, const float* dy, int64_t lddy, const float* g,
                       int64_t ldg, const float* u, int64_t ldu, int64_t rows, int64_t F, SituParams p) {
  const float b1 = p.beta, ib1 = 1.0f / p.beta, b2 = p.linear_beta, ib2 = 1.0f / p.linear_beta;
  const bool clamp_u = !std::isinf(b2);
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(F, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* gr = g + r * ldg;
      const float* ur = u + r * ldu;
      const float* dyr = dy + r * lddy;
      float* dgr = dg + r * lddg;
      float* dur = du + r * lddu;
#pragma omp simd
      for (int64_t j = 0; j < F; ++j) {
        const float tg = fast_tanh(gr[j] * ib1), s = fast_sigmoid(gr[j]);
        const float f = b1 * tg * s;
        const float fprime = (1.0f - tg * tg) * s + b1 * tg * s * (1.0f - s);
        if (clamp_u) {
          const float tu = fast_tanh(ur[j] * ib2);
          dgr[j] += dyr[j] * fprime * b2 * tu;
          dur[j] += dyr[j] * f * (1.0f - tu * tu);
        } else {  // h(u) = u, h'(u) = 1
          dgr[j] += dyr[j] * fprime * ur[j];
          dur[j] += dyr[j] * f;
        }
      }
    }
  });
}

void glu_forward(GluParams p, float* y, const float* g, const float* u, int64_t rows, int64_t F) {
  if (p.kind == GluKind::kSitu) {
    situ_glu_forward(y, F, g, F, u, F, rows, F, p.situ);
    return;
  }
  // SwiGLU: silu(g) * u exactly as ag::mul(ag::silu(g), u) computes it.
  const int64_t m = rows * F;
  unary_forward(Unary::kSiLU, y, g, m);
#pragma omp simd
  for (int64_t i = 0; i < m; ++i) y[i] *= u[i];
}

}  // namespace myriad::cpu
