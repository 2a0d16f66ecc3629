// Elementwise kernels: activations (forward / backward), broadcasting binary ops, scale, axpy, SiTU-GLU.
// Grid-stride loops with 64-bit indices; every kernel computes in f32 with the accurate libdevice expf / tanhf /
// log1pf (no fast-math intrinsics), the same formulas as the reference in ops/ref/elementwise.h.
// Shape legend: n elements, F SiTU-GLU width, rows the leading axis.
#include <vector>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_common.cuh"

namespace myriad::cuda {

namespace {

using detail::grid_for;
using detail::kThreads;
using detail::sigmoidf;

#define MYRIAD_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <Unary op>
__device__ __forceinline__ float unary_value(float x) {
  if constexpr (op == Unary::kSiLU) {
    return x * sigmoidf(x);
  } else if constexpr (op == Unary::kSigmoid) {
    return sigmoidf(x);
  } else if constexpr (op == Unary::kTanh) {
    return tanhf(x);
  } else if constexpr (op == Unary::kGeluTanh) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
  } else if constexpr (op == Unary::kGelu) {
    return 0.5f * x * (1.0f + erff(x * 0.7071067812f));
  } else {
    static_assert(op == Unary::kSoftplus);
    return x > 20.0f ? x : log1pf(expf(x));  // the reference's cut-off
  }
}

template <Unary op>
__device__ __forceinline__ float unary_derivative(float x) {
  if constexpr (op == Unary::kSiLU) {
    const float s = sigmoidf(x);
    return s * (1.0f + x * (1.0f - s));
  } else if constexpr (op == Unary::kSigmoid) {
    const float s = sigmoidf(x);
    return s * (1.0f - s);
  } else if constexpr (op == Unary::kTanh) {
    const float t = tanhf(x);
    return 1.0f - t * t;
  } else if constexpr (op == Unary::kGeluTanh) {
    const float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
  } else if constexpr (op == Unary::kGelu) {
    return 0.5f * (1.0f + erff(x * 0.7071067812f)) + x * 0.3989422804f * expf(-0.5f * x * x);
  } else {
    static_assert(op == Unary::kSoftplus);
    return sigmoidf(x);
  }
}

template <Unary op>
__global__ void unary_forward_kernel(float* y, const float* x, int64_t n) {
  MYRIAD_GRID_STRIDE(i, n) y[i] = unary_value<op>(x[i]);
}

// NOTE: += : backward kernels accumulate (kernels.h convention).
template <Unary op>
__global__ void unary_backward_kernel(float* dx, const float* dy, const float* x, int64_t n) {
  MYRIAD_GRID_STRIDE(i, n) dx[i] += dy[i] * unary_derivative<op>(x[i]);
}

// Broadcast geometry passed by value (kernel parameter space). Strides count elements; 0 on broadcast axes.
constexpr int kMaxDims = 8;
struct BroadcastGeometry {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t a_strides[kMaxDims] = {};
  int64_t b_strides[kMaxDims] = {};
};

template <Binary op>
__global__ void binary_kernel(float* out, const float* a, const float* b, BroadcastGeometry geo, int64_t n) {
  MYRIAD_GRID_STRIDE(i, n) {
    int64_t rem = i, oa = 0, ob = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= geo.ndim) continue;
      const int64_t c = rem % geo.shape[d];
      rem /= geo.shape[d];
      oa += c * geo.a_strides[d];
      ob += c * geo.b_strides[d];
    }
    // One IEEE operation per element: bit-identical to the cpu kernel.
    out[i] = op == Binary::kAdd ? a[oa] + b[ob] : a[oa] * b[ob];
  }
}

__global__ void scale_kernel(float* y, const float* x, float alpha, int64_t n) {
  MYRIAD_GRID_STRIDE(i, n) y[i] = alpha * x[i];
}
__global__ void axpy_kernel(float* y, const float* x, float alpha, int64_t n) {
  MYRIAD_GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

// SiTU-GLU (docs/design.md §1.5): f(g) = b1 tanh(g/b1) sigmoid(g), h(u) = b2 tanh(u/b2), y = f(g) h(u).
__global__ void situ_glu_forward_kernel(float* y, int64_t ldy, const float* g, int64_t ldg, const float* u, int64_t ldu,
                                        int64_t rows, int64_t F, float b1, float b2) {
  MYRIAD_GRID_STRIDE(i, rows * F) {
    const int64_t r = i / F, j = i % F;
    const float gv = g[r * ldg + j], uv = u[r * ldu + j];
    const float h = isinf(b2) ? uv : b2 * tanhf(uv / b2);  // b2 infinite: no clamp
    y[r * ldy + j] = b1 * tanhf(gv / b1) * sigmoidf(gv) * h;
  }
}

// f'(g) = (1 - tanh^2(g/b1)) sigmoid(g) + b1 tanh(g/b1) sigmoid(g) (1 - sigmoid(g)); h'(u) = 1 - tanh^2(u/b2).
// dg += dy f'(g) h(u), du += dy f(g) h'(u).
__global__ void situ_glu_backward_kernel(float* dg, int64_t lddg, float* du, int64_t lddu, const float* dy,
                                         int64_t lddy, const float* g, int64_t ldg, const float* u, int64_t ldu,
                                         int64_t rows, int64_t F, float b1, float b2) {
  MYRIAD_GRID_STRIDE(i, rows * F) {
    const int64_t r = i / F, j = i % F;
    const float gv = g[r * ldg + j], uv = u[r * ldu + j], d = dy[r * lddy + j];
    const float tg = tanhf(gv / b1), s = sigmoidf(gv);
    const float f = b1 * tg * s;
    const float fprime = (1.0f - tg * tg) * s + b1 * tg * s * (1.0f - s);
    const bool clamp = !isinf(b2);
    const float tu = clamp ? tanhf(uv / b2) : 0.0f;
    dg[r * lddg + j] += d * fprime * (clamp ? b2 * tu : uv);
    du[r * lddu + j] += d * f * (clamp ? 1.0f - tu * tu : 1.0f);
  }
}

#undef MYRIAD_GRID_STRIDE

}  // namespace

void unary_forward(Unary op, float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  const unsigned grid = grid_for(n);
  switch (op) {
    case Unary::kSiLU:
      unary_forward_kernel<Unary::kSiLU><<<grid, kThreads>>>(y, x, n);
      break;
    case Unary::kSigmoid:
      unary_forward_kernel<Unary::kSigmoid><<<grid, kThreads>>>(y, x, n);
      break;
    case Unary::kTanh:
      unary_forward_kernel<Unary::kTanh><<<grid, kThreads>>>(y, x, n);
      break;
    case Unary::kSoftplus:
      unary_forward_kernel<Unary::kSoftplus><<<grid, kThreads>>>(y, x, n);
      break;
    case Unary::kGeluTanh:
      unary_forward_kernel<Unary::kGeluTanh><<<grid, kThreads>>>(y, x, n);
      break;
    case Unary::kGelu:
      unary_forward_kernel<Unary::kGelu><<<grid, kThreads>>>(y, x, n);
      break;
    default:
      throw_error(ErrorKind::kValue, "cuda::unary_forward: unknown op ", int(op));
  }
  MYRIAD_CUDA_CHECK_LAUNCH("unary_forward_kernel");
}

void unary_backward(Unary op, float* dx, const float* dy, const float* x, int64_t n) {
  if (n <= 0) return;
  const unsigned grid = grid_for(n);
  switch (op) {
    case Unary::kSiLU:
      unary_backward_kernel<Unary::kSiLU><<<grid, kThreads>>>(dx, dy, x, n);
      break;
    case Unary::kSigmoid:
      unary_backward_kernel<Unary::kSigmoid><<<grid, kThreads>>>(dx, dy, x, n);
      break;
    case Unary::kTanh:
      unary_backward_kernel<Unary::kTanh><<<grid, kThreads>>>(dx, dy, x, n);
      break;
    case Unary::kSoftplus:
      unary_backward_kernel<Unary::kSoftplus><<<grid, kThreads>>>(dx, dy, x, n);
      break;
    case Unary::kGeluTanh:
      unary_backward_kernel<Unary::kGeluTanh><<<grid, kThreads>>>(dx, dy, x, n);
      break;
    case Unary::kGelu:
      unary_backward_kernel<Unary::kGelu><<<grid, kThreads>>>(dx, dy, x, n);
      break;
    default:
      throw_error(ErrorKind::kValue, "cuda::unary_backward: unknown op ", int(op));
  }
  MYRIAD_CUDA_CHECK_LAUNCH("unary_backward_kernel");
}

void binary_forward(Binary op, float* out, const float* a, const int64_t* a_strides, const float* b,
                    const int64_t* b_strides, const int64_t* shape, int ndim) {
  MYRIAD_REQUIRE(ndim >= 0, kShape, "cuda::binary_forward: ndim ", ndim, " < 0");
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    MYRIAD_REQUIRE(shape[d] >= 0, kShape, "cuda::binary_forward: shape[", d, "] = ", shape[d], " < 0");
    n *= shape[d];
  }
  if (n == 0) return;
  // Drop size-1 axes (their index is always 0) and merge an axis into the one outside it when both inputs step
  // through the pair as one axis (contiguous runs, or broadcast in both): fewer divisions per element.
  std::vector<int64_t> s, sa, sb;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    if (!s.empty() && sa.back() == a_strides[d] * shape[d] && sb.back() == b_strides[d] * shape[d]) {
      s.back() *= shape[d];
      sa.back() = a_strides[d];
      sb.back() = b_strides[d];
    } else {
      s.push_back(shape[d]);
      sa.push_back(a_strides[d]);
      sb.push_back(b_strides[d]);
    }
  }
  MYRIAD_REQUIRE(s.size() <= size_t(kMaxDims), kUnsupported, "cuda::binary_forward: ", s.size(),
                 " axes after merging (from ndim ", ndim, "); the CUDA kernel handles at most ", kMaxDims);
  BroadcastGeometry geo;
  geo.ndim = int(s.size());
  for (size_t d = 0; d < s.size(); ++d) {
    geo.shape[d] = s[d];
    geo.a_strides[d] = sa[d];
    geo.b_strides[d] = sb[d];
  }
  const unsigned grid = grid_for(n);
  switch (op) {
    case Binary::kAdd:
      binary_kernel<Binary::kAdd><<<grid, kThreads>>>(out, a, b, geo, n);
      break;
    case Binary::kMul:
      binary_kernel<Binary::kMul><<<grid, kThreads>>>(out, a, b, geo, n);
      break;
    default:
      throw_error(ErrorKind::kValue, "cuda::binary_forward: unknown op ", int(op));
  }
  MYRIAD_CUDA_CHECK_LAUNCH("binary_kernel");
}

void scale(float* y, const float* x, float alpha, int64_t n) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n), kThreads>>>(y, x, alpha, n);
  MYRIAD_CUDA_CHECK_LAUNCH("scale_kernel");
}

void axpy(float* y, const float* x, float alpha, int64_t n) {
  if (n <= 0) return;
  axpy_kernel<<<grid_for(n), kThreads>>>(y, x, alpha, n);
  MYRIAD_CUDA_CHECK_LAUNCH("axpy_kernel");
}

void situ_glu_forward(float* y, int64_t ldy, const float* g, int64_t ldg, const float* u, int64_t ldu, int64_t rows,
                      int64_t F, SituParams p) {
  if (rows <= 0 || F <= 0) return;
  situ_glu_forward_kernel<<<grid_for(rows * F), kThreads>>>(y, ldy, g, ldg, u, ldu, rows, F, p.beta, p.linear_beta);
  MYRIAD_CUDA_CHECK_LAUNCH("situ_glu_forward_kernel");
}

void situ_glu_backward(float* dg, int64_t lddg, float* du, int64_t lddu, const float* dy, int64_t lddy, const float* g,
                       int64_t ldg, const float* u, int64_t ldu, int64_t rows, int64_t F, SituParams p) {
  if (rows <= 0 || F <= 0) return;
  situ_glu_backward_kernel<<<grid_for(rows * F), kThreads>>>(dg, lddg, du, lddu, dy, lddy, g, ldg, u, ldu, rows, F,
                                                             p.beta, p.linear_beta);
  MYRIAD_CUDA_CHECK_LAUNCH("situ_glu_backward_kernel");
}

}  // namespace myriad::cuda
