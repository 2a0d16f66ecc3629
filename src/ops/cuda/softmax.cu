// Softmax over rows of N, forward and backward. One block per row; three passes over the row (max, sum of
// exponentials, write), f32 block reductions by warp shuffles. y may alias x.
//   forward:  y_j = exp(x_j - max) / sum_k exp(x_k - max)
//   backward: dx_j += y_j (dy_j - sum_k dy_k y_k)
// Shape legend: rows the leading axes flattened, N row length.
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_common.cuh"

namespace myriad::cuda {

namespace {

using detail::block_max;
using detail::block_sum;

__global__ void softmax_forward_kernel(float* y, const float* x, int64_t rows, int64_t N) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x_N = x + r * N;
    float* y_N = y + r * N;
    float mx = -CUDART_INF_F;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) mx = fmaxf(mx, x_N[j]);
    mx = block_max(mx);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) s += expf(x_N[j] - mx);
    s = block_sum(s);
    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) y_N[j] = expf(x_N[j] - mx) * inv;
  }
}

__global__ void softmax_backward_kernel(float* dx, const float* dy, const float* y, int64_t rows, int64_t N) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * N;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) dot += dy[base + j] * y[base + j];
    dot = block_sum(dot);
    // NOTE: += : backward kernels accumulate (kernels.h convention).
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x) dx[base + j] += y[base + j] * (dy[base + j] - dot);
  }
}

}  // namespace

void softmax_forward(float* y, const float* x, int64_t rows, int64_t N) {
  if (rows <= 0 || N <= 0) return;
  softmax_forward_kernel<<<detail::row_grid(rows), detail::row_threads(N)>>>(y, x, rows, N);
  MYRIAD_CUDA_CHECK_LAUNCH("softmax_forward_kernel");
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t N) {
  if (rows <= 0 || N <= 0) return;
  softmax_backward_kernel<<<detail::row_grid(rows), detail::row_threads(N)>>>(dx, dy, y, rows, N);
  MYRIAD_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

}  // namespace myriad::cuda
